package com.example.qnnsample.qnndeploy

import android.content.Context
import android.util.Log
import com.k2fsa.sherpa.onnx.OfflineWhisperModelConfig
import com.k2fsa.sherpa.onnx.QnnConfig

/**
 * sherpa-onnx on the NPU, with the CPU fallback: the model config's provider and QnnConfig from the decision.
 * On the NPU sherpa-onnx reads the graphs from QnnConfig.contextBinary and leaves the model fields empty;
 * on the CPU the model fields hold the bundle's .onnx files and QnnConfig stays empty.
 */
object SherpaOnnxQnn {
    /** The bundle's graphs in its own order: the order of sherpa-onnx's comma-separated contextBinary. */
    val GRAPHS: List<String> = Generated.GRAPHS

    /** "qnn" on the NPU, "cpu" otherwise: the model config's provider. */
    fun provider(selection: Selection): String = if (selection.decision.npu) "qnn" else "cpu"

    /** A model field (encoder, decoder, model, ...): the graph's .onnx on the CPU, empty on the NPU. */
    fun model(selection: Selection, graph: String): String = if (selection.decision.npu) "" else selection.path(graph)

    /** QnnConfig for the given graphs, in the order the model type expects; empty on the CPU. */
    fun qnnConfig(selection: Selection, graphs: List<String> = GRAPHS): QnnConfig {
        val decision = selection.decision
        if (!decision.npu) return QnnConfig()
        return QnnConfig(
            backendLib = decision.backendLib ?: "libQnnHtp.so",
            contextBinary = graphs.joinToString(",") { selection.path(it) },
            systemLib = decision.systemLib ?: "libQnnSystem.so",
        )
    }

    /** The encoder and decoder of the bundle's decode loop (a Whisper qnndeploy validated as the app runs it). */
    val LOOP: List<String> = Generated.LOOP

    /**
     * Whisper, selected for this engine: sherpa-onnx runs Whisper's context binaries from C++
     * (OfflineWhisperModelConfig.qnn_config, contextBinary "<encoder>.bin,<decoder>.bin": qnnConfig(selection, LOOP)),
     * but its Kotlin OfflineWhisperModelConfig has no qnnConfig field (k2-fsa/sherpa-onnx 634265c, 2026-08-08), so an
     * app that builds the recognizer from Kotlin runs Whisper on the CPU, with that reason in its decision.
     */
    fun selectWhisper(context: Context): Selection {
        check(LOOP.size == 2) { "the bundle has no decode loop: build it from a build validated with --loop" }
        val selection = QnnRuntime.select(context, FileFormat.QNN_CONTEXT_BINARY)
        if (!selection.decision.npu) return selection
        return selection.toCpu(
            Reasons.engineCpuOnly(
                engine = "sherpa-onnx's Kotlin API", model = "Whisper",
                why = "its OfflineWhisperModelConfig takes no QnnConfig",
            ),
        )
    }

    /** The whisper field of sherpa-onnx's OfflineModelConfig for a selection from [selectWhisper]. */
    fun whisper(selection: Selection): OfflineWhisperModelConfig =
        OfflineWhisperModelConfig(encoder = model(selection, LOOP[0]), decoder = model(selection, LOOP[1]))

    /** The model config's tokens: the bundle's tokenizer file, the one qnndeploy validated the loop's text with. */
    fun tokens(selection: Selection): String =
        selection.tokenizerPath() ?: throw IllegalStateException("the bundle ships no tokenizer file")

    /**
     * Selects NPU or CPU and builds the engine with [build] (e.g. an OfflineRecognizer from a config that uses
     * provider(), model() and qnnConfig()). If building on the NPU throws, the failure is remembered and the
     * engine is built again for the CPU.
     */
    fun <T> create(context: Context, build: (Selection) -> T): T {
        val selection = QnnRuntime.select(context, FileFormat.QNN_CONTEXT_BINARY)
        if (!selection.decision.npu) return build(selection)
        return try {
            selection.guardNpuInit {
                // The ADSP path call: the Skel folder first in ADSP_LIBRARY_PATH (';'-separated) before the engine
                // creates its QNN device. select() set it already; this re-applies it in case other code replaced it.
                QnnRuntime.applyAdspLibraryPath(selection)
                build(selection)
            }
        } catch (e: Exception) {
            Log.w(QnnRuntime.TAG, "NPU init failed, using the CPU", e)
            build(selection.toCpu(Reasons.npuInitFailed(error = e.message ?: e.javaClass.name)))
        }
    }
}
