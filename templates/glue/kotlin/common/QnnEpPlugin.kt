package com.example.qnnsample.qnndeploy

/**
 * Qualcomm's QNN execution provider plugin for ONNX Runtime (com.qualcomm.qti:onnxruntime-android-qnn): the library
 * file its AAR ships, which the app registers with ONNX Runtime, and the EP name of the devices it then offers, as the
 * AAR's own helpers ai.onnxruntime.qnnpluginep.getLibraryPath() and getEpName() give them. Generated.QNN_EP_PLUGIN
 * holds the bundle's, or null when the app's ONNX Runtime has the QNN provider built in.
 */
data class QnnEpPlugin(val library: String, val epName: String)
