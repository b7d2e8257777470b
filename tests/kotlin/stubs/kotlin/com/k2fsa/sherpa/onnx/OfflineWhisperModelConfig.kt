package com.k2fsa.sherpa.onnx

// Stand-in for sherpa-onnx's Kotlin API class of the same name (sherpa-onnx/kotlin-api/OfflineRecognizer.kt at
// k2-fsa/sherpa-onnx 634265c): its fields and defaults; it has no qnnConfig.
data class OfflineWhisperModelConfig(
    var encoder: String = "",
    var decoder: String = "",
    var language: String = "en",
    var task: String = "transcribe",
    var tailPaddings: Int = 1000,
    var enableTokenTimestamps: Boolean = false,
    var enableSegmentTimestamps: Boolean = false,
)
