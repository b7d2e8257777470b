package com.example.qnnsample.qnndeploy

import ai.onnxruntime.OnnxTensorLike
import ai.onnxruntime.OnnxValue
import ai.onnxruntime.OrtEnvironment
import ai.onnxruntime.OrtEpDevice
import ai.onnxruntime.OrtException
import ai.onnxruntime.OrtSession
import android.content.Context
import android.os.Process
import android.util.Log
import java.io.File

/**
 * One ONNX Runtime session per graph of the bundle: on the NPU through the QNN execution provider, built into
 * Microsoft's AAR or registered from Qualcomm's plugin AAR (Generated.QNN_EP_PLUGIN, OrtQnnPlugin) (the EPContext
 * .onnx that wraps the SoC's context binary, or on a SoC without a bundle target the bundle's ONNX compiled here:
 * Decision.npuSource "on-device"), or on the CPU (the bundle's .onnx), as QnnSelector decided.
 */
class OrtModels private constructor(
    val selection: Selection,
    internal val sessions: Map<String, OrtSession>,
    /** on-device NPU only: whether the sessions came from the cache, or how long their compile took */
    val onDevice: OnDeviceOpen? = null,
) : AutoCloseable {
    val decision: Decision get() = selection.decision

    /**
     * The JSON line OrtModels.open logs once the sessions are open: provider, npu_source, and for an on-device NPU
     * cache_hit and compile_s (the first compile's seconds; null on a cache hit).
     */
    internal fun logLine(): String = MiniJson.write(
        linkedMapOf(
            "provider" to decision.provider.id, "npu_source" to decision.npuSource, "cache_hit" to onDevice?.cacheHit,
            "compile_s" to onDevice?.compileS,
        ),
    )

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

        /** Where the on-device compile's cache lives, in the app's files folder (beside BundleFiles' qnndeploy/). */
        internal const val CACHE_DIR = "qnndeploy-ondevice"

        /**
         * Selects NPU or CPU, then opens every graph. If the NPU sessions fail to open, the failure is remembered
         * (the next starts use the CPU until the app or bundle version changes) and the CPU models are opened.
         * htpPerformanceMode: burst, sustained_high_performance, high_performance, balanced, power_saver, ...;
         * null: the bundle's (`bundle --performance-mode`), else burst.
         * On a SoC without a bundle target whose arch the bundle's on-device compile was validated for (Decision
         * npuSource "on-device"), the first open compiles the ONNX with the QNN EP, which takes seconds to minutes:
         * call it off the main thread. onCompileProgress is then called on the calling thread with the seconds
         * elapsed, every OnDeviceCompile.PROGRESS_INTERVAL_MS (it runs while the glue holds its lock, so it may post
         * to another thread but must not wait for one that calls into the glue); past the bundle's budget (manifest
         * on_device.budget_s) the app takes the CPU and remembers it. Later opens load the compiled contexts from
         * app storage.
         * platform: what the loaded QNN backend reports (see Platform), for a SoC the catalog does not know; null by
         * default. It counts at the process's first select only (QnnRuntime.select decides once).
         */
        fun open(
            context: Context,
            htpPerformanceMode: String? = null,
            platform: Platform? = null,
            onCompileProgress: ((elapsedS: Double) -> Unit)? = null,
        ): OrtModels {
            val env = OrtEnvironment.getEnvironment()
            val selection = QnnRuntime.select(context, FileFormat.ORT_EPCONTEXT, platform)
            val mode = htpPerformanceMode ?: selection.manifest.htpPerformanceMode ?: DEFAULT_PERFORMANCE_MODE
            if (!selection.decision.npu) return opened(OrtModels(selection, openAll(env, selection, mode)))
            return try {
                if (selection.decision.npuSource == NpuSource.ON_DEVICE) {
                    val cache = cache(File(context.filesDir, CACHE_DIR), selection)
                    // a progress callback that throws is the app's bug, not the compile's: logged, and the compile goes on
                    val progress: ((Double) -> Unit)? = onCompileProgress?.let { report ->
                        { seconds ->
                            try {
                                report(seconds)
                            } catch (e: Exception) {
                                Log.w(QnnRuntime.TAG, "onCompileProgress threw", e)
                            }
                        }
                    }
                    val (sessions, how) = selection.guardNpuInit { openOnDevice(env, selection, mode, cache, progress) }
                    opened(OrtModels(selection, sessions, how))
                } else {
                    opened(OrtModels(selection, selection.guardNpuInit { openAll(env, selection, mode) }))
                }
            } catch (e: OrtException) {
                Log.w(QnnRuntime.TAG, "NPU init failed, using the CPU", e)
                val cpu = selection.toCpu(Reasons.npuInitFailed(error = e.message ?: e.javaClass.name))
                opened(OrtModels(cpu, openAll(env, cpu, mode)))
            } catch (e: OnDeviceCompileException) {
                Log.w(QnnRuntime.TAG, "on-device compile: ${e.message}, using the CPU", e)
                val cpu = selection.toCpu(e.reason)
                opened(OrtModels(cpu, openAll(env, cpu, mode)))
            }
        }

        private fun opened(models: OrtModels): OrtModels {
            Log.i(QnnRuntime.TAG, "opened ${models.logLine()}")
            return models
        }

        /** The on-device cache of a selection: keyed by app version, bundle version, QNN runtime version and SoC. */
        internal fun cache(root: File, selection: Selection): OnDeviceCache {
            val d = selection.decision
            return OnDeviceCache(
                root,
                linkedMapOf(
                    "app_version" to selection.appVersion, "bundle_version" to selection.bundleVersion,
                    "runtime_version" to d.runtimeVersion, "soc" to d.soc, "soc_id" to d.socId, "dsp_arch" to d.dspArch,
                ),
                ProcessStamp.of(Process.myPid()),
            )
        }

        /**
         * The on-device NPU sessions: from the cache when it holds this key's compile, else compiled now into a new
         * folder under the budget (OnDeviceCompile.withinBudget), which is renamed into the cache once every graph
         * compiled. A cache that fails to load is deleted (and the failure remembered by guardNpuInit).
         */
        private fun openOnDevice(
            env: OrtEnvironment,
            selection: Selection,
            mode: String,
            cache: OnDeviceCache,
            progress: ((Double) -> Unit)?,
        ): Pair<Map<String, OrtSession>, OnDeviceOpen> {
            val decision = selection.decision
            val npuGraphs = decision.paths.keys.filter { it !in decision.cpuGraphs }
            if (cache.hit(npuGraphs)) {
                val sessions = try {
                    openEach(decision.paths.keys) { graph ->
                        if (graph in decision.cpuGraphs) {
                            cpuSession(env, selection, graph)
                        } else {
                            sessionOptions(decision, mode, graph = graph).use {
                                env.createSession(cache.contextFile(cache.folder, graph).path, it)
                            }
                        }
                    }
                } catch (e: OrtException) {
                    cache.clear()
                    throw e
                }
                return sessions to OnDeviceOpen(cacheHit = true, compileS = null, folder = cache.folder)
            }
            val temp = cache.begin()
            val start = System.nanoTime()
            val sessions = OnDeviceCompile.withinBudget(
                budgetS = decision.compileBudgetS ?: OnDevice.DEFAULT_BUDGET_S,
                progress = progress,
                work = {
                    openEach(decision.paths.keys) { graph ->
                        if (graph in decision.cpuGraphs) {
                            cpuSession(env, selection, graph)
                        } else {
                            val ctx = cache.contextFile(temp, graph)
                            sessionOptions(decision, mode, graph = graph, compileTo = ctx).use {
                                env.createSession(selection.path(graph), it)
                            }
                        }
                    }
                },
                commit = { cache.commit(temp) },
                abandon = { made ->
                    made?.values?.forEach { it.close() }
                    temp.deleteRecursively()
                },
            )
            val seconds = (System.nanoTime() - start) / 1e9
            return sessions to OnDeviceOpen(cacheHit = false, compileS = seconds, folder = cache.folder)
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
         * Session options for a decision: the QNN EP (qnnOptions) on the NPU, plain options on the CPU. The QNN EP is
         * Qualcomm's plugin when `plugin` names it (registered once, its devices added with the options:
         * OrtQnnPlugin), else the provider built into Microsoft's AAR (SessionOptions.addQnn).
         * shareContext: the graphs' sessions load one shared context binary once (ep.share_ep_contexts).
         * On an on-device NPU decision: the graph's ep_options of the manifest besides qnnOptions (which win), and
         * with compileTo, the session compiles the ONNX and writes its EP context there (ep.context_enable, the
         * context binary in a file beside it: ep.context_embed_mode 0).
         */
        internal fun sessionOptions(
            decision: Decision,
            htpPerformanceMode: String,
            shareContext: Boolean = false,
            graph: String? = null,
            compileTo: File? = null,
            plugin: QnnEpPlugin? = Generated.QNN_EP_PLUGIN,
        ): OrtSession.SessionOptions {
            val qnn = if (decision.npu) qnnOptions(decision, htpPerformanceMode) else null
            val options = OrtSession.SessionOptions()
            if (qnn != null) try {
                // The whole graph must run on the HTP: a node left on the CPU would be a silent slowdown.
                options.addConfigEntry("session.disable_cpu_ep_fallback", "1")
                if (shareContext) options.addConfigEntry("ep.share_ep_contexts", "1")
                if (compileTo != null) {
                    options.addConfigEntry("ep.context_enable", "1")
                    options.addConfigEntry("ep.context_embed_mode", "0")
                    options.addConfigEntry("ep.context_file_path", compileTo.path)
                }
                val extra = graph?.let { decision.epOptions[it] }.orEmpty()
                val providerOptions = qnn + extra.filterKeys { it !in qnn }
                if (plugin == null) {
                    options.addQnn(providerOptions)
                } else {
                    options.addExecutionProvider(OrtQnnPlugin.devices(OrtEnvironment.getEnvironment(), plugin), providerOptions)
                }
            } catch (e: Exception) {
                options.close()
                throw e
            }
            return options
        }

        private fun cpuSession(env: OrtEnvironment, selection: Selection, graph: String): OrtSession {
            val decision = selection.decision.copy(provider = Provider.CPU)
            return sessionOptions(decision, DEFAULT_PERFORMANCE_MODE).use { env.createSession(selection.path(graph), it) }
        }

        /** A session per graph from [open]; if one fails, those already open are closed. */
        private fun openEach(graphs: Collection<String>, open: (String) -> OrtSession): Map<String, OrtSession> {
            val opened = LinkedHashMap<String, OrtSession>()
            try {
                for (graph in graphs) opened[graph] = open(graph)
            } catch (e: Exception) {
                opened.values.forEach { it.close() }
                throw e
            }
            return opened
        }

        private fun openAll(env: OrtEnvironment, selection: Selection, mode: String): Map<String, OrtSession> =
            openEach(selection.decision.paths.keys) { graph ->
                // a split model's CPU part gets plain CPU options even when the decision is the NPU
                if (graph in selection.decision.cpuGraphs) {
                    cpuSession(env, selection, graph)
                } else {
                    sessionOptions(selection.decision, mode, selection.sharesContext).use {
                        env.createSession(selection.path(graph), it)
                    }
                }
            }
    }
}

/**
 * Qualcomm's QNN execution provider plugin, registered as its Android API has it (Qualcomm's own Android test in
 * onnxruntime/onnxruntime-qnn, java/src/test/android): OrtEnvironment.registerExecutionProviderLibrary under the EP
 * name with the plugin's library file, then the environment's OrtEpDevices of that EP name, which
 * SessionOptions.addExecutionProvider takes with the provider options. ONNX Runtime refuses a second registration
 * under one name, so the library is registered only while the environment offers none of the plugin's devices (the
 * app may have registered it itself).
 */
internal object OrtQnnPlugin {
    fun devices(env: OrtEnvironment, plugin: QnnEpPlugin): List<OrtEpDevice> {
        synchronized(this) {
            val offered = env.epDevices.filter { it.epName == plugin.epName }
            if (offered.isNotEmpty()) return offered
            env.registerExecutionProviderLibrary(plugin.epName, plugin.library)
            val devices = env.epDevices.filter { it.epName == plugin.epName }
            if (devices.isEmpty()) {
                throw OrtException("${plugin.library} registered, but ONNX Runtime offers no ${plugin.epName} device")
            }
            return devices
        }
    }
}
