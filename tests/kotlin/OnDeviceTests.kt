package qnndeploy.tests

// JVM tests of the on-device path of the generated glue (Decision npuSource "on-device": a SoC without a bundle
// target, the bundle's ONNX compiled on the phone by ONNX Runtime's QNN EP, cached). tests/scaffold/test_kotlin.py
// compiles this with the glue rendered for com.example.qnnsample and runs:
//   qnndeploy.tests.OnDeviceTests ASSETS_DIR SCRATCH_DIR
// ASSETS_DIR is a scaffolded app's bundle/assets folder (a real bundle: targets SM8550 and SM8750); each test makes
// an app of its own from it whose manifest has on_device. The QNN EP cannot run here: its session creation is stood
// in by OrtEnvironment.STAND_IN_CREATE (tests/kotlin/stubs), which writes the EP context file where
// ep.context_file_path says, as the EP does, or takes its time, or fails.

import ai.onnxruntime.OrtEnvironment
import ai.onnxruntime.OrtException
import ai.onnxruntime.OrtSession
import android.os.Build
import android.util.Log
import com.example.qnnsample.qnndeploy.AndroidHost
import com.example.qnnsample.qnndeploy.BundleManifest
import com.example.qnnsample.qnndeploy.DeviceIdentity
import com.example.qnnsample.qnndeploy.FileFormat
import com.example.qnnsample.qnndeploy.Generated
import com.example.qnnsample.qnndeploy.MiniJson
import com.example.qnnsample.qnndeploy.NpuSource
import com.example.qnnsample.qnndeploy.OnDeviceCache
import com.example.qnnsample.qnndeploy.OnDeviceCompile
import com.example.qnnsample.qnndeploy.OrtModels
import com.example.qnnsample.qnndeploy.Platform
import com.example.qnnsample.qnndeploy.ProcessStamp
import com.example.qnnsample.qnndeploy.Provider
import com.example.qnnsample.qnndeploy.QnnEpPlugin
import com.example.qnnsample.qnndeploy.QnnRuntime
import com.example.qnnsample.qnndeploy.QnnSelector
import qnndeploy.testsupport.FakeContext
import qnndeploy.testsupport.runTests
import java.io.File
import java.util.concurrent.CountDownLatch
import kotlin.test.assertContains
import kotlin.test.assertEquals
import kotlin.test.assertFalse
import kotlin.test.assertNotNull
import kotlin.test.assertNull
import kotlin.test.assertTrue

/**
 * One session creation as the stand-in saw it: the model, the session config entries and the QNN EP options, and
 * the EP names of the devices they were added with (Qualcomm's plugin: SessionOptions.addExecutionProvider), null when
 * they went to Microsoft's built-in provider (SessionOptions.addQnn).
 */
internal data class Created(
    val model: String,
    val config: Map<String, String>,
    val qnn: Map<String, String>?,
    val epDevices: List<String>? = null,
)

internal class OnDeviceSuite(val assets: File, val scratch: File) {
    private val raw = MiniJson.parse(File(assets, "qnndeploy/manifest.json").readText()) as Map<*, *>
    private val options = mapOf(
        "enable_htp_fp16_precision" to "1", "htp_graph_finalization_optimization_mode" to "3", "vtcm_mb" to "8",
    )
    private val validated = listOf("v69", "v73", "v75", "v79", "v81", "v85")

    /** The bundle's manifest with on_device: the CPU models compiled on the phone, validated for v69 to v85. */
    fun onDevice(budgetS: Double = 60.0, validated: List<String> = this.validated): Map<*, *> = raw + mapOf(
        "format_version" to 4L,
        "on_device" to mapOf(
            "budget_s" to budgetS,
            "graphs" to listOf("det", "rec").map {
                mapOf("graph" to it, "path" to "cpu/$it.onnx", "ep_options" to options, "validated" to validated)
            },
            "artifacts" to emptyList<Any>(),
        ),
    )

    /** An app whose assets hold the bundle with this manifest, its files in a folder of its own. */
    fun app(name: String, manifest: Map<*, *>): FakeContext {
        val dir = File(scratch, name)
        dir.deleteRecursively()
        val appAssets = File(dir, "assets")
        assets.copyRecursively(appAssets)
        File(appAssets, "qnndeploy/manifest.json").writeText(MiniJson.write(manifest))
        return FakeContext(appAssets, File(dir, "files"), LIB_DIR, "com.example.qnnsample")
    }

    /** Every session creation, and what it does: the EP's compile writes the context file and its binary. */
    private val created = ArrayList<Created>()

    private fun standIn(extra: (String, OrtSession.SessionOptions) -> Unit = { _, _ -> }) {
        created.clear()
        OrtEnvironment.STAND_IN_CREATE = OrtEnvironment.StandInCreate { model, options ->
            val qnn = (options.standInEpOptions ?: options.standInQnnOptions)?.toMap()
            val devices = options.standInEpDevices?.map { it.epName }
            synchronized(created) { created.add(Created(model, options.standInConfig.toMap(), qnn, devices)) }
            extra(model, options)
            val ctx = options.standInConfig["ep.context_file_path"]
            if (options.standInConfig["ep.context_enable"] == "1" && ctx != null) {
                File(ctx).writeText("EPContext model of $model")
                File(ctx.removeSuffix(".onnx") + "_qnn.bin").writeText("context binary of $model")
            }
        }
    }

    /** A phone with an SM8845 (v81, soc_model 97: in the catalog, not a bundle target) and a QNN runtime that loads. */
    private fun <T> onSm8845(runtime: String? = "2.51.0", block: () -> T): T = onPhone("SM8845", runtime, block)

    /** A phone with the SoC `soc` and a QNN runtime that loads. */
    private fun <T> onPhone(soc: String, runtime: String? = "2.51.0", block: () -> T): T {
        Build.VERSION.SDK_INT = 35
        Build.SOC_MODEL = soc
        QnnRuntime.forget()
        QnnRuntime.host = FakeHost(runtimeVersion = runtime)
        try {
            return block()
        } finally {
            QnnRuntime.host = AndroidHost
            QnnRuntime.forget()
            OrtEnvironment.STAND_IN_CREATE = null
        }
    }

    private fun cacheOf(context: FakeContext) = File(context.filesDir, "qnndeploy-ondevice")

    private fun partials(context: FakeContext): List<String> =
        cacheOf(context).listFiles().orEmpty().map { it.name }.filter { it.endsWith(".partial") }

    /** Waits for the compile thread that outlived its budget to end (state, not time: it was released). */
    private fun joinWorkers() {
        Thread.getAllStackTraces().keys.filter { it.name == OnDeviceCompile.WORKER }.forEach { it.join() }
    }

    fun tests(): List<Pair<String, () -> Unit>> = listOf(
        "with Qualcomm's plugin AAR the glue registers its library once and opens the NPU sessions through its devices" to {
            // the default scaffold of a QAIRT 2.49.40 bundle pins Qualcomm's validated set (plugin 2.5.0,
            // onnxruntime-android 1.26.0, qnn-runtime 2.49.0), whose library and EP name the AAR's helpers give
            assertEquals(QnnEpPlugin("libonnxruntime_providers_qnn.so", "QNNExecutionProvider"), Generated.QNN_EP_PLUGIN)
            OrtEnvironment.STAND_IN_REGISTERED.clear()
            onPhone("SM8750") {
                standIn()
                val context = app("plugin", raw)
                val models = OrtModels.open(context)
                val d = models.decision
                assertEquals(Provider.NPU to NpuSource.PREBUILT, d.provider to d.npuSource, d.reason)
                assertEquals(
                    mapOf("QNNExecutionProvider" to "libonnxruntime_providers_qnn.so"),
                    OrtEnvironment.STAND_IN_REGISTERED.toMap(),
                    "registered under its EP name with the AAR's library file",
                )
                assertEquals(listOf("det_ctx.onnx", "rec_ctx.onnx"), created.map { File(it.model).name }.sorted())
                for (c in created) {
                    assertEquals(listOf("QNNExecutionProvider"), c.epDevices, "the plugin's devices, not addQnn")
                    assertEquals(
                        mapOf("backend_path" to "libQnnHtp.so", "htp_performance_mode" to "burst", "soc_model" to "69", "htp_arch" to "79"),
                        c.qnn,
                    )
                    assertEquals("1", c.config["session.disable_cpu_ep_fallback"], "no silent CPU fallback")
                }
                assertEquals(setOf("det", "rec"), models.sessions.keys)
                models.close()
                QnnRuntime.forget() // the next start, in the same process: ONNX Runtime refuses a second registration
                val again = OrtModels.open(context)
                assertEquals(Provider.NPU, again.decision.provider, again.decision.reason)
                again.close()
                assertEquals(1, OrtEnvironment.STAND_IN_REGISTERED.size)
            }
        },
        "Microsoft's AAR gets addQnn and no registration; a plugin library that does not load sends the app to the CPU" to {
            OrtEnvironment.STAND_IN_REGISTERED.clear()
            val d = QnnSelector.decide(BundleManifest.from(raw), DeviceIdentity("SM8750", null, 35), FakeHost(), LIB_DIR, FileFormat.ORT_EPCONTEXT)
            OrtModels.sessionOptions(d, "burst", plugin = null).use {
                assertEquals("69", it.standInQnnOptions?.get("soc_model"))
                assertNull(it.standInEpDevices)
            }
            assertEquals(emptyMap(), OrtEnvironment.STAND_IN_REGISTERED.toMap())
            val library = OrtEnvironment.STAND_IN_PLUGINS.remove("libonnxruntime_providers_qnn.so")
            try {
                onPhone("SM8750") {
                    standIn()
                    val models = OrtModels.open(app("no-plugin", raw))
                    assertEquals(Provider.CPU, models.decision.provider)
                    assertContains(models.decision.reason, "cannot load execution provider library libonnxruntime_providers_qnn.so")
                    assertTrue(created.all { it.qnn == null }, "the CPU models, opened without the QNN EP")
                    models.close()
                }
            } finally {
                OrtEnvironment.STAND_IN_PLUGINS["libonnxruntime_providers_qnn.so"] = library!!
            }
        },
        "a SoC without a target compiles on the device: the first open writes the cache, the next opens load it" to {
            onSm8845 {
                standIn()
                val context = app("first", onDevice())
                val progress = ArrayList<Double>()
                Log.LINES.clear()
                val models = OrtModels.open(context, onCompileProgress = { progress.add(it) })
                val d = models.decision
                assertEquals(Provider.NPU to "npu_on_device", d.provider to d.reasonKey, d.reason)
                assertEquals(
                    "SoC SM8845 (v81) is not in the bundle; the app compiles the model for it on the device " +
                        "(validated for v81) and the QNN libraries loaded",
                    d.reason,
                )
                assertEquals(listOf(NpuSource.ON_DEVICE, "v81", 97L), listOf(d.npuSource, d.dspArch, d.socId))
                assertEquals(mapOf("det" to "cpu/det.onnx", "rec" to "cpu/rec.onnx"), d.paths)
                assertEquals(60.0, d.compileBudgetS)
                val first = assertNotNull(models.onDevice)
                assertFalse(first.cacheHit)
                assertTrue(first.compileS.let { it != null && it >= 0.0 }, "${first.compileS}")
                // each graph compiled from the bundle's ONNX in app storage, with the options the spec names
                assertEquals(listOf("det", "rec"), created.map { File(it.model).name.removeSuffix(".onnx") })
                for (c in created) {
                    assertTrue(File(c.model).isFile, "the model is in app storage: ${c.model}")
                    assertEquals("1", c.config["ep.context_enable"])
                    assertEquals("0", c.config["ep.context_embed_mode"])
                    assertEquals("1", c.config["session.disable_cpu_ep_fallback"])
                    val ctx = File(c.config.getValue("ep.context_file_path"))
                    assertEquals(File(c.model).name.removeSuffix(".onnx") + "_ctx.onnx", ctx.name)
                    assertTrue(ctx.parentFile.name.endsWith(".partial"), "compiled into a folder of its own: $ctx")
                    assertEquals(
                        mapOf(
                            "backend_path" to "libQnnHtp.so", "htp_performance_mode" to "burst", "soc_model" to "97",
                            "htp_arch" to "81", "enable_htp_fp16_precision" to "1",
                            "htp_graph_finalization_optimization_mode" to "3", "vtcm_mb" to "8",
                        ),
                        c.qnn,
                    )
                }
                assertTrue(File(context.filesDir, "qnndeploy/cpu/rec.onnx.data").isFile, "rec's external data beside it")
                val cache = File(cacheOf(context), "ctx")
                assertEquals(first.folder, cache)
                assertEquals(
                    setOf("det_ctx.onnx", "det_ctx_qnn.bin", "rec_ctx.onnx", "rec_ctx_qnn.bin", "key.json"),
                    cache.list()!!.toSet(),
                )
                assertEquals(emptyList(), partials(context), "the temporary folder was renamed into place")
                val key = MiniJson.parse(File(cache, "key.json").readText()) as Map<*, *>
                assertEquals(
                    listOf("1.0 (1) 1", "demo 1.0.0", "2.51.0", "SM8845", 97L, "v81"),
                    listOf("app_version", "bundle_version", "runtime_version", "soc", "soc_id", "dsp_arch").map { key[it] },
                )
                val opened = Log.LINES.single { it.startsWith("qnndeploy: opened ") }
                val line = MiniJson.parse(opened.removePrefix("qnndeploy: opened ")) as Map<*, *>
                assertEquals(listOf("npu", "on-device", false), listOf(line["provider"], line["npu_source"], line["cache_hit"]))
                assertEquals(first.compileS, line["compile_s"])
                assertContains(Log.LINES.single { it.startsWith("qnndeploy: decision ") }, "\"npu_source\":\"on-device\"")
                models.close()

                QnnRuntime.forget() // the next start
                created.clear()
                Log.LINES.clear()
                progress.clear()
                val again = OrtModels.open(context, onCompileProgress = { progress.add(it) })
                val hit = assertNotNull(again.onDevice)
                assertEquals(true to null, hit.cacheHit to hit.compileS)
                assertEquals(listOf("det_ctx.onnx", "rec_ctx.onnx"), created.map { File(it.model).name })
                assertTrue(created.all { File(it.model).parentFile == cache }, "loaded from the cache")
                assertTrue(created.all { "ep.context_enable" !in it.config }, "nothing compiled")
                assertEquals("97" to "81", created[0].qnn!!["soc_model"] to created[0].qnn!!["htp_arch"])
                assertEquals(emptyList(), progress, "no compile, no progress")
                assertContains(Log.LINES.single { it.startsWith("qnndeploy: opened ") }, "\"cache_hit\":true,\"compile_s\":null")
                again.close()
            }
        },
        "a new app version or QNN runtime compiles again and deletes the old cache" to {
            onSm8845 {
                standIn()
                val context = app("key", onDevice())
                OrtModels.open(context).close()
                val cache = File(cacheOf(context), "ctx")
                val stale = File(cache, "left-by-the-old-key").apply { writeText("x") }
                QnnRuntime.forget()
                context.updated = 2L // an app update
                created.clear()
                val updated = OrtModels.open(context)
                assertEquals(false, updated.onDevice?.cacheHit)
                assertEquals(2, created.count { it.config["ep.context_enable"] == "1" })
                assertFalse(stale.exists(), "the old key's folder is gone")
                assertContains(File(cache, "key.json").readText(), "\"app_version\":\"1.0 (1) 2\"")
                updated.close()
                QnnRuntime.forget()
                assertEquals(true, OrtModels.open(context).also { it.close() }.onDevice?.cacheHit, "same key: a hit")
                QnnRuntime.forget()
                QnnRuntime.host = FakeHost(runtimeVersion = "2.52.0") // another QNN runtime
                val newRuntime = OrtModels.open(context)
                assertEquals(false, newRuntime.onDevice?.cacheHit)
                assertContains(File(cache, "key.json").readText(), "\"runtime_version\":\"2.52.0\"")
                newRuntime.close()
                QnnRuntime.forget()
                File(cache, "rec_ctx.onnx").delete() // a cache missing a graph is no hit
                assertEquals(false, OrtModels.open(context).also { it.close() }.onDevice?.cacheHit)
            }
        },
        "a compile past the budget gives the CPU, is remembered, and its late end leaves the cache alone" to {
            onSm8845 {
                val release = CountDownLatch(1)
                standIn { _, options -> if (options.standInConfig["ep.context_enable"] == "1") release.await() }
                val context = app("timeout", onDevice(budgetS = 0.3))
                val openedBefore = OrtSession.OPENED.get()
                val closedBefore = OrtSession.CLOSED.get()
                val start = System.nanoTime()
                val models = OrtModels.open(context)
                val waited = (System.nanoTime() - start) / 1e9
                val d = models.decision
                assertEquals(Provider.CPU to "on_device_timeout", d.provider to d.reasonKey)
                assertEquals("the on-device compile did not finish within 0.3 s", d.reason)
                assertTrue(waited >= 0.3, "waited the budget: $waited s")
                assertNull(models.onDevice)
                assertEquals(mapOf("det" to "cpu/det.onnx", "rec" to "cpu/rec.onnx"), d.paths)
                assertEquals(2, models.sessions.size, "the CPU sessions")
                assertFalse(File(cacheOf(context), "ctx").exists(), "nothing in the cache")
                assertEquals(1, partials(context).size, "the compile still runs in its own folder")
                models.close()
                QnnRuntime.forget() // the next start: remembered
                val next = QnnRuntime.select(context, FileFormat.ORT_EPCONTEXT).decision
                assertEquals(Provider.CPU to "failed_before", next.provider to next.reasonKey)
                assertContains(next.reason, "(the on-device compile did not finish within 0.3 s)")
                release.countDown() // the native compile ends at last
                joinWorkers()
                assertFalse(File(cacheOf(context), "ctx").exists(), "the late compile is not put in the cache")
                assertEquals(emptyList(), partials(context), "and its folder is deleted")
                assertEquals(2 + 2, OrtSession.OPENED.get() - openedBefore, "two compiled sessions and two CPU ones")
                assertEquals(2 + 2, OrtSession.CLOSED.get() - closedBefore, "the late sessions closed too")
            }
        },
        "a failed compile gives the CPU with the EP's message, is remembered, and caches nothing" to {
            onSm8845 {
                standIn { model, options ->
                    if (options.standInConfig["ep.context_enable"] == "1" && model.endsWith("rec.onnx")) {
                        throw OrtException("QNN error 6031: graph finalize failed")
                    }
                }
                val context = app("failed", onDevice())
                val closedBefore = OrtSession.CLOSED.get()
                val models = OrtModels.open(context)
                val d = models.decision
                assertEquals(Provider.CPU to "on_device_compile_failed", d.provider to d.reasonKey)
                assertEquals("on-device compile failed: QNN error 6031: graph finalize failed", d.reason)
                assertEquals(1, OrtSession.CLOSED.get() - closedBefore, "det's compiled session is closed")
                assertFalse(File(cacheOf(context), "ctx").exists())
                assertEquals(emptyList(), partials(context))
                models.close()
                QnnRuntime.forget()
                val next = QnnRuntime.select(context, FileFormat.ORT_EPCONTEXT).decision
                assertEquals("failed_before", next.reasonKey)
                assertContains(next.reason, "(on-device compile failed: QNN error 6031: graph finalize failed)")
                QnnRuntime.forget()
                context.updated = 2L
                assertEquals(NpuSource.ON_DEVICE, QnnRuntime.select(context, FileFormat.ORT_EPCONTEXT).decision.npuSource,
                    "an app update tries again")
            }
        },
        "a cache that fails to load is deleted, and the failure remembered" to {
            onSm8845 {
                standIn()
                val context = app("damaged", onDevice())
                OrtModels.open(context).close()
                QnnRuntime.forget()
                standIn { model, _ -> if (model.endsWith("_ctx.onnx")) throw OrtException("Failed to load EPContext") }
                val models = OrtModels.open(context)
                assertEquals("npu_init_failed" to "NPU init failed: Failed to load EPContext", models.decision.reasonKey to models.decision.reason)
                assertFalse(File(cacheOf(context), "ctx").exists(), "the damaged cache is gone")
                models.close()
                QnnRuntime.forget()
                assertEquals("failed_before", QnnRuntime.select(context, FileFormat.ORT_EPCONTEXT).decision.reasonKey)
            }
        },
        "the progress callback gets the seconds elapsed, on the caller's thread, while the first compile runs" to {
            onSm8845 {
                val calls = CountDownLatch(3)
                // det's compile ends only once progress was reported three times: state, not timing
                standIn { model, options ->
                    if (options.standInConfig["ep.context_enable"] == "1" && model.endsWith("det.onnx")) calls.await()
                }
                val context = app("progress", onDevice())
                val seen = ArrayList<Double>()
                val caller = Thread.currentThread()
                val models = OrtModels.open(context, onCompileProgress = {
                    check(Thread.currentThread() === caller) { "progress is called on the thread that opens" }
                    seen.add(it)
                    calls.countDown()
                })
                assertEquals(Provider.NPU, models.decision.provider, models.decision.reason)
                assertTrue(seen.size >= 3, "$seen")
                assertEquals(seen.sorted(), seen, "elapsed time only grows")
                assertTrue(seen.first() >= OnDeviceCompile.PROGRESS_INTERVAL_MS / 1000.0 * 0.9, "every interval: $seen")
                assertTrue(seen.last() <= models.onDevice!!.compileS!!, "within the compile: $seen")
                models.close()
            }
        },
        "a progress callback that throws is logged and the compile goes on; an interrupted open abandons its compile" to {
            onSm8845 {
                val calls = CountDownLatch(2)
                standIn { model, options ->
                    if (options.standInConfig["ep.context_enable"] == "1" && model.endsWith("det.onnx")) calls.await()
                }
                Log.LINES.clear()
                val context = app("throwing-progress", onDevice())
                val models = OrtModels.open(context, onCompileProgress = {
                    calls.countDown()
                    throw IllegalStateException("the app's progress bar is gone")
                })
                assertEquals(NpuSource.ON_DEVICE to false, models.decision.npuSource to models.onDevice?.cacheHit, models.decision.reason)
                assertTrue(Log.LINES.count { it.startsWith("qnndeploy: onCompileProgress threw") } >= 2)
                models.close()

                QnnRuntime.forget()
                val entered = CountDownLatch(1)
                val release = CountDownLatch(1)
                standIn { _, options ->
                    if (options.standInConfig["ep.context_enable"] == "1") {
                        entered.countDown()
                        release.await()
                    }
                }
                val other = app("interrupted", onDevice())
                var thrown: Throwable? = null
                val opener = Thread {
                    try {
                        OrtModels.open(other)
                    } catch (e: Throwable) {
                        thrown = e
                    }
                }
                opener.start()
                entered.await() // the compile runs
                opener.interrupt()
                opener.join()
                assertTrue(thrown is InterruptedException, "$thrown")
                release.countDown()
                joinWorkers()
                assertFalse(File(cacheOf(other), "ctx").exists(), "the abandoned compile is not put in the cache")
                assertEquals(emptyList(), partials(other))
            }
        },
        "a compile leaves the temporary folders of the app's other running processes alone, and deletes the rest" to {
            val root = File(scratch, "partials").apply { deleteRecursively() }
            val child = ProcessBuilder("sleep", "600").start() // another process of the app, compiling
            try {
                val other = ProcessStamp.of(child.pid().toInt())
                val self = ProcessStamp.of(ProcessHandle.current().pid().toInt())
                val live = File(root, "ctx-${other.pid}-${other.start}-7.partial").apply { mkdirs() }
                val ended = File(root, "ctx-${other.pid}-${other.start + 1}-7.partial").apply { mkdirs() }
                val odd = File(root, "ctx-123.partial").apply { mkdirs() }
                val oldKey = File(root, "ctx").apply { mkdirs(); File(this, "key.json").writeText("{}") }
                val temp = OnDeviceCache(root, mapOf("app_version" to "2"), self).begin()
                assertTrue(live.isDirectory, "a running process's compile is left alone")
                assertFalse(ended.exists() || odd.exists(), "those of ended processes (or of no process) go")
                assertFalse(oldKey.exists(), "and the cache of another key")
                assertTrue(temp.isDirectory && temp.name.startsWith("ctx-${self.pid}-${self.start}-"), temp.name)
            } finally {
                child.destroy()
                child.waitFor()
            }
        },
        "a data file several CPU models share goes with each of them, once (a generation part's two graphs)" to {
            val cpu = (raw["cpu"] as List<*>).map { f ->
                f as Map<*, *>
                if (f["path"] == "cpu/rec.onnx.data") f - "graph" + ("graphs" to listOf("det", "rec")) else f
            }
            val m = BundleManifest.from(onDevice() + mapOf("format_version" to 7L, "cpu" to cpu))
            val npu = QnnSelector.decide(m, DeviceIdentity("SM8845", null, 35), FakeHost(), LIB_DIR, FileFormat.ORT_EPCONTEXT)
            assertEquals(NpuSource.ON_DEVICE, npu.npuSource)
            assertEquals(listOf("cpu/det.onnx", "cpu/rec.onnx.data", "cpu/rec.onnx"), npu.files)
        },
        "the decision on phones without a target: catalog arch, platform info, validated arches, runtime age" to {
            val m = BundleManifest.from(onDevice(validated = listOf("v73", "v79", "v81")))
            val parsed = assertNotNull(m.onDevice)
            assertEquals(60.0, parsed.budgetS)
            assertEquals(listOf("v73", "v79", "v81"), parsed.graphs[0].validated)
            assertEquals("8", parsed.graphs[1].epOptions["vtcm_mb"])
            val sm8845 = DeviceIdentity("SM8845", null, 35)
            val host = FakeHost(runtimeVersion = "2.51.0")
            val npu = QnnSelector.decide(m, sm8845, host, LIB_DIR, FileFormat.ORT_EPCONTEXT)
            assertEquals(NpuSource.ON_DEVICE to "npu_on_device", npu.npuSource to npu.reasonKey)
            assertEquals(listOf("cpu/det.onnx", "cpu/rec.onnx", "cpu/rec.onnx.data"), npu.files)
            assertEquals(mapOf("det" to "8", "rec" to "8"), npu.epOptions.mapValues { it.value["vtcm_mb"] })
            assertEquals(
                listOf("setenv ADSP_LIBRARY_PATH", "load libQnnSystem.so", "load libQnnHtp.so", "load libQnnHtpV81Stub.so", "runtime version"),
                host.calls,
            )
            val prebuilt = QnnSelector.decide(m, DeviceIdentity("SM8750", null, 35), FakeHost(), LIB_DIR, FileFormat.ORT_EPCONTEXT)
            assertEquals(NpuSource.PREBUILT to "npu", prebuilt.npuSource to prebuilt.reasonKey, "a target is used as before")
            val sm8350 = QnnSelector.decide(m, DeviceIdentity("SM8350", null, 35), FakeHost(), LIB_DIR)
            assertEquals(Provider.CPU to "not_validated_on_device", sm8350.provider to sm8350.reasonKey)
            assertEquals(
                "SoC SM8350 (v68) is not in the bundle (targets: SM8550, SM8750) and the bundle's on-device compile " +
                    "was not validated for v68 (validated: v73, v79, v81)",
                sm8350.reason,
            )
            val unknown = DeviceIdentity("SM9999", null, 35)
            val noInfo = QnnSelector.decide(m, unknown, FakeHost(), LIB_DIR)
            assertEquals("arch_unknown", noInfo.reasonKey)
            assertEquals(
                "SoC SM9999 is not in the SoC catalog and the QNN backend reported no platform info: its HTP arch is unknown",
                noInfo.reason,
            )
            val withInfo = QnnSelector.decide(m, unknown, FakeHost(), LIB_DIR, platform = Platform(socModel = 123, dspArch = "v79"))
            assertEquals(listOf("npu_on_device", "SM9999", "v79", 123L), listOf(withInfo.reasonKey, withInfo.soc, withInfo.dspArch, withInfo.socId))
            val old = QnnSelector.decide(m, sm8845, FakeHost(runtimeVersion = "2.46.9"), LIB_DIR)
            assertEquals(Provider.CPU to "runtime_too_old_for_arch", old.provider to old.reasonKey)
            assertEquals(
                "the QNN runtime that loaded is QAIRT 2.46.9, older than QAIRT 2.47.0, the oldest measured to compile for v81",
                old.reason,
            )
            assertEquals("npu_on_device", QnnSelector.decide(m, sm8845, FakeHost(), LIB_DIR).reasonKey, "unknown version: no refusal")
            val plain = BundleManifest.from(raw)
            assertNull(plain.onDevice)
            assertEquals("soc_not_in_bundle", QnnSelector.decide(plain, sm8845, FakeHost(), LIB_DIR).reasonKey, "no on_device: as before")
        },
    )
}

object OnDeviceTests {
    @JvmStatic
    fun main(args: Array<String>) {
        runTests(OnDeviceSuite(File(args[0]), File(args[1])).tests())
    }
}
