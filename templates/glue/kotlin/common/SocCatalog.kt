package com.example.qnnsample.qnndeploy

/**
 * qnndeploy's SoC catalog (qnndeploy/data/socs.json), the one source of these facts, as scaffold wrote its tables
 * into Generated.kt; the decision rules that use them are qnndeploy/decide/decision.py's, in QnnSelector.
 */
internal object SocCatalog {
    /** Build.SOC_MODEL / ro.soc.model values, models and aliases, upper case -> the catalog model. */
    val MODELS: Map<String, String> get() = Generated.SOC_MODELS

    /** ro.board.platform codenames (Android 11 and older have no ro.soc.model), lower case -> the catalog model. */
    val CODENAMES: Map<String, String> get() = Generated.CODENAMES

    /** Catalog model -> its HTP arch ("v81"). */
    val ARCHS: Map<String, String> get() = Generated.SOC_ARCHS

    /** Catalog model -> its QNN soc_model number. */
    val IDS: Map<String, Long> get() = Generated.SOC_IDS

    /** HTP arch -> the oldest QAIRT measured to compile for it (decision.arch_min_qairt): measured, never guessed. */
    val ARCH_MIN_QAIRT: Map<String, String> get() = Generated.ARCH_MIN_QAIRT

    /** Where the DSP looks when ADSP_LIBRARY_PATH is unset: kept after the app's folder once it is set. */
    val VENDOR_DSP_FOLDERS: List<String> get() = Generated.VENDOR_DSP_FOLDERS
}
