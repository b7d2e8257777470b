package com.example.qnnsample.qnndeploy

/**
 * qnndeploy's SoC catalog (qnndeploy/data/socs.json), the one source of these facts, as scaffold wrote its tables
 * into Generated.kt; the decision rules that use them are qnndeploy/formats/decision.py's, in QnnSelector.
 */
internal object SocCatalog {
    /** Build.SOC_MODEL / ro.soc.model values, models and aliases, upper case -> the catalog model. */
    val MODELS: Map<String, String> get() = Generated.SOC_MODELS

    /** ro.board.platform codenames (Android 11 and older have no ro.soc.model), lower case -> the catalog model. */
    val CODENAMES: Map<String, String> get() = Generated.CODENAMES

    /** Where the DSP looks when ADSP_LIBRARY_PATH is unset: kept after the app's folder once it is set. */
    val VENDOR_DSP_FOLDERS: List<String> get() = Generated.VENDOR_DSP_FOLDERS
}
