package com.example.qnnsample.qnndeploy

import ai.onnxruntime.OnnxTensorLike
import ai.onnxruntime.OnnxValue
import ai.onnxruntime.OrtEnvironment
import ai.onnxruntime.OrtException
import ai.onnxruntime.OrtSession
import android.content.Context
import android.util.Log

/**
 * One ONNX Runtime session per graph of the bundle: on the NPU through the QNN execution provider (the EPContext
 * .onnx that wraps the SoC's context binary), or on the CPU (the bundle's .onnx), as QnnSelector decided.
 */
class OrtModels private constructor(val selection: Selection, internal val sessions: Map<String, OrtSession>) : AutoCloseable {
    val decision: Decision get() = selection.decision

    fun session(graph: String): OrtSession =
        sessions[graph] ?: throw IllegalArgumentException("graph '$graph' is not in the bundle")

    /**
     * Runs the graphs in the bundle's pipeline order (a split model: the CPU part, then the NPU part), each fed by
     * input name from `inputs` and the outputs of the graphs before it. The caller closes what it returns.
     */
    fun run(inputs: Map<String, OnnxTensorLike>): PipelineResult {
        val results = ArrayList<OrtSession.Result>()
        val values = LinkedHashMap<String, OnnxValue>()
        try {
            for (graph in selection.manifest.pipeline) {
                val session = session(graph)
                val feed = session.inputNames.associateWith { name ->
                    inputs[name] ?: values[name] as? OnnxTensorLike
                        ?: throw IllegalArgumentException("graph '$graph' needs input '$name', which no input or earlier graph gives")
                }
                val result = session.run(feed)
                results.add(result)
                for ((name, value) in result) values[name] = value
            }
        } catch (e: Exception) {
            results.forEach { it.close() }
            throw e
        }
        return PipelineResult(results, values)
    }

    /** Every output of a pipeline run by name; closing it closes the runs' results. */
    class PipelineResult internal constructor(
        private val results: List<OrtSession.Result>,
        val values: Map<String, OnnxValue>,
    ) : AutoCloseable {
        override fun close() = results.forEach { it.close() }
    }

    override fun close() = sessions.values.forEach { it.close() }

    companion object {
        internal const val DEFAULT_PERFORMANCE_MODE = "burst"

        /**
         * Selects NPU or CPU, then opens every graph. If the NPU sessions fail to open, the failure is remembered
         * (the next starts use the CPU until the app or bundle version changes) and the CPU models are opened.
         * htpPerformanceMode: burst, sustained_high_performance, high_performance, balanced, power_saver, ...;
         * null: the bundle's (`bundle --performance-mode`), else burst.
         */
        fun open(context: Context, htpPerformanceMode: String? = null): OrtModels {
            val env = OrtEnvironment.getEnvironment()
            val selection = QnnRuntime.select(context, FileFormat.ORT_EPCONTEXT)
            val mode = htpPerformanceMode ?: selection.manifest.htpPerformanceMode ?: DEFAULT_PERFORMANCE_MODE
            if (!selection.decision.npu) return OrtModels(selection, openAll(env, selection, mode))
            return try {
                OrtModels(selection, selection.guardNpuInit { openAll(env, selection, mode) })
            } catch (e: OrtException) {
                Log.w(QnnRuntime.TAG, "NPU init failed, using the CPU", e)
                val cpu = selection.toCpu(Reasons.npuInitFailed(error = e.message ?: e.javaClass.name))
                OrtModels(cpu, openAll(env, cpu, mode))
            }
        }

        /**
         * The QNN execution provider's options on the NPU: the HTP backend, the performance mode, and the target's
         * soc_model and htp_arch (79 for v79), always given: the provider's own SoC detection fails on some phones
         * (QNN_DEVICE_ERROR_INVALID_CONFIG on a Galaxy S25's SM8750-AC), so it is never relied on.
         */
        internal fun qnnOptions(decision: Decision, htpPerformanceMode: String): Map<String, String> {
            val socId = checkNotNull(decision.socId) { "an NPU decision names its target's soc_model" }
            val arch = checkNotNull(decision.dspArch) { "an NPU decision names its target's HTP arch" }
            return linkedMapOf(
                "backend_path" to (decision.backendLib ?: "libQnnHtp.so"),
                "htp_performance_mode" to htpPerformanceMode,
                "soc_model" to socId.toString(),
                "htp_arch" to arch.removePrefix("v"),
            )
        }

        /**
         * Session options for a decision: the QNN EP (qnnOptions) on the NPU, plain options on the CPU.
         * shareContext: the graphs' sessions load one shared context binary once (ep.share_ep_contexts).
         */
        internal fun sessionOptions(
            decision: Decision,
            htpPerformanceMode: String,
            shareContext: Boolean = false,
        ): OrtSession.SessionOptions {
            val qnn = if (decision.npu) qnnOptions(decision, htpPerformanceMode) else null
            val options = OrtSession.SessionOptions()
            if (qnn != null) {
                // The whole graph must run on the HTP: a node left on the CPU would be a silent slowdown.
                options.addConfigEntry("session.disable_cpu_ep_fallback", "1")
                if (shareContext) options.addConfigEntry("ep.share_ep_contexts", "1")
                options.addQnn(qnn)
            }
            return options
        }

        private fun openAll(env: OrtEnvironment, selection: Selection, mode: String): Map<String, OrtSession> {
            val opened = LinkedHashMap<String, OrtSession>()
            try {
                for (graph in selection.decision.paths.keys) {
                    // a split model's CPU part gets plain CPU options even when the decision is the NPU
                    val onCpu = graph in selection.decision.cpuGraphs
                    val decision = if (onCpu) selection.decision.copy(provider = Provider.CPU) else selection.decision
                    sessionOptions(decision, mode, selection.sharesContext && !onCpu).use {
                        opened[graph] = env.createSession(selection.path(graph), it)
                    }
                }
            } catch (e: Exception) {
                opened.values.forEach { it.close() }
                throw e
            }
            return opened
        }
    }
}
