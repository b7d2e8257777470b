package com.k2fsa.sherpa.onnx

// Stand-in for sherpa-onnx's Kotlin API class of the same name (sherpa-onnx/kotlin-api/QnnConfig.kt): a plain
// data class that mirrors the native QnnConfig field for field.
data class QnnConfig(
    var backendLib: String = "",
    var contextBinary: String = "",
    var systemLib: String = "",
)
