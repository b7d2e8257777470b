package qnndeploy.tests

// Unit tests of the generated glue on the JVM (kotlin-test assertions; there is no JUnit here, so main() runs them).
// tests/scaffold/test_kotlin.py compiles this with the glue rendered for com.example.qnnsample and runs:
//   SelectorTestsKt MANIFESTS.json ASSETS_DIR SCRATCH_DIR
// MANIFESTS.json holds the manifests of tests/support/bundles.py; ASSETS_DIR is a scaffolded app's bundle/assets folder.

import ai.onnxruntime.OrtSession
import android.os.Build
import android.os.Process
import android.system.Os
import android.util.Log
import com.example.qnnsample.qnndeploy.AndroidHost
import com.example.qnnsample.qnndeploy.BundleFiles
import com.example.qnnsample.qnndeploy.BundleManifest
import com.example.qnnsample.qnndeploy.DeviceIdentity
import com.example.qnnsample.qnndeploy.FailureMemory
import com.example.qnnsample.qnndeploy.FileFormat
import com.example.qnnsample.qnndeploy.MiniJson
import com.example.qnnsample.qnndeploy.NativeHost
import com.example.qnnsample.qnndeploy.OrtModels
import com.example.qnnsample.qnndeploy.ProcessStamp
import com.example.qnnsample.qnndeploy.Provider
import com.example.qnnsample.qnndeploy.QnnLibraries
import com.example.qnnsample.qnndeploy.QnnRuntime
import com.example.qnnsample.qnndeploy.QnnSelector
import com.example.qnnsample.qnndeploy.Reasons
import com.example.qnnsample.qnndeploy.RememberedFailure
import com.example.qnnsample.qnndeploy.RuntimeMode
import com.example.qnnsample.qnndeploy.Selection
import com.example.qnnsample.qnndeploy.SocIdentity
import com.example.qnnsample.qnndeploy.Tensor
import java.io.File
import qnndeploy.testsupport.FakeContext
import qnndeploy.testsupport.runTests
import java.io.FileInputStream
import java.io.IOException
import java.lang.management.ManagementFactory
import java.nio.file.Files
import java.security.MessageDigest
import kotlin.concurrent.thread
import kotlin.test.assertContains
import kotlin.test.assertEquals
import kotlin.test.assertFailsWith
import kotlin.test.assertFalse
import kotlin.test.assertNotNull
import kotlin.test.assertNull
import kotlin.test.assertSame
import kotlin.test.assertTrue

const val LIB_DIR = "/data/app/~~x/com.example.qnnsample-1/lib/arm64"

/**
 * A process whose libraries fail to load with the given messages (and whose setenv fails with setenvError, if
 * given) and whose loaded libQnnHtp.so is of QAIRT runtimeVersion; it records every call in order.
 */
internal class FakeHost(
    private val errors: Map<String, String> = emptyMap(),
    env: Map<String, String> = emptyMap(),
    private val setenvError: String? = null,
    private val runtimeVersion: String? = null,
) : NativeHost {
    val env = HashMap(env)
    val calls = ArrayList<String>()

    override fun getenv(name: String): String? = env[name]

    override fun setenv(name: String, value: String) {
        calls.add("setenv $name")
        setenvError?.let { throw IllegalArgumentException(it) } // what android.system.Os.setenv's ErrnoException does
        env[name] = value
    }

    override fun loadLibrary(fileName: String) {
        calls.add("load $fileName")
        errors[fileName]?.let { throw UnsatisfiedLinkError(it) }
    }

    override fun qnnRuntimeVersion(): String? {
        calls.add("runtime version")
        return runtimeVersion
    }
}

/**
 * Returns once [thread] has ended or waits for a lock that [owner] holds: a thread that takes turns with [owner] is
 * then known to be waiting for it, one that does not has run to its end. (No time limit: state, not timing.)
 */
fun waitUntilDoneOrBlockedBy(thread: Thread, owner: Thread) {
    val threads = ManagementFactory.getThreadMXBean()
    while (thread.isAlive) {
        val info = threads.getThreadInfo(thread.id)
        if (info != null && info.threadState == Thread.State.BLOCKED && info.lockOwnerId == owner.id) return
        Thread.sleep(1)
    }
}

/** Every file and link under root, relative, '/'-separated. */
fun tree(root: File): Set<String> =
    root.walk().filter { !it.isDirectory || Files.isSymbolicLink(it.toPath()) }.map { it.relativeTo(root).invariantSeparatorsPath }.toSet()

internal class Suite(val manifests: Map<*, *>, val assets: File, val scratch: File) {
    val m = BundleManifest.from(manifests["two_targets"])
    val bundled = BundleManifest.from(manifests["bundled"])
    val sm8750 = DeviceIdentity("SM8750", "sun", 35)

    fun tests(): List<Pair<String, () -> Unit>> = listOf(
        "matching SoC and loading libraries give the NPU with the target's paths" to {
            val host = FakeHost()
            val d = QnnSelector.decide(m, sm8750, host, LIB_DIR)
            assertTrue(d.npu, d.reason)
            assertEquals("SM8750", d.soc)
            assertEquals(mapOf("det" to "npu/SM8750/det.bin", "rec" to "npu/SM8750/rec.bin"), d.paths)
            assertEquals("libQnnHtp.so" to "libQnnSystem.so", d.backendLib to d.systemLib)
            assertEquals("v79" to 69L, d.dspArch to d.socId, "the target's HTP arch and QNN soc_model")
            assertEquals(
                listOf(
                    "setenv ADSP_LIBRARY_PATH", "load libQnnSystem.so", "load libQnnHtp.so", "load libQnnHtpV79Stub.so",
                    "runtime version",
                ),
                host.calls,
                "ADSP_LIBRARY_PATH is set before any QNN library loads; the runtime's version is read after",
            )
            val ort = QnnSelector.decide(m, sm8750, FakeHost(), LIB_DIR, npuFormat = FileFormat.ORT_EPCONTEXT)
            assertEquals("npu/SM8750/det_ctx.onnx", ort.paths["det"])
            assertEquals(Provider.NPU to "npu", d.provider to d.reasonKey)
        },
        "a target whose failed graph was accepted for the CPU goes to the CPU and loads nothing" to {
            val accepted = BundleManifest.from(manifests["accepted_cpu"])
            assertEquals(mapOf("rec" to "r-rec"), accepted.targets.first { it.soc == "SM8750" }.accepted)
            assertEquals("cpu", accepted.targets.first { it.soc == "SM8750" }.acceptedOn)
            val host = FakeHost()
            val d = QnnSelector.decide(accepted, sm8750, host, LIB_DIR)
            assertEquals(Provider.CPU to "validation_failed", d.provider to d.reasonKey)
            assertEquals(
                "graph \"rec\" failed validation on SM8750 and the bundle asks for the CPU there (accepted: r-rec)",
                d.reason,
            )
            assertEquals(mapOf("det" to "cpu/det.onnx", "rec" to "cpu/rec.onnx"), d.paths)
            assertEquals(emptyList(), host.calls, "decided before ADSP_LIBRARY_PATH and the QNN libraries")
            val other = QnnSelector.decide(accepted, DeviceIdentity("SM8550", "kalama", 34), FakeHost(), LIB_DIR)
            assertTrue(other.npu, "another SoC's target keeps the NPU: ${other.reason}")
        },
        "a SoC that is not in the bundle goes to the CPU and loads nothing" to {
            val host = FakeHost()
            val d = QnnSelector.decide(m, DeviceIdentity("SM8650", "pineapple", 34), host, LIB_DIR)
            assertFalse(d.npu)
            assertEquals("SoC SM8650 is not in the bundle (targets: SM8550, SM8750)", d.reason)
            assertEquals(Provider.CPU to "soc_not_in_bundle", d.provider to d.reasonKey)
            assertEquals(mapOf("det" to "cpu/det.onnx", "rec" to "cpu/rec.onnx"), d.paths)
            assertEquals(emptyList(), host.calls)
        },
        "libraries that fail to load give the CPU with every loader message" to {
            val host = FakeHost(
                mapOf(
                    "libQnnHtp.so" to "dlopen failed: library \"libcdsprpc.so\" not found",
                    "libQnnHtpV79Stub.so" to "dlopen failed: cannot locate symbol",
                ),
            )
            val d = QnnSelector.decide(m, sm8750, host, LIB_DIR)
            assertFalse(d.npu)
            assertEquals(
                "QNN libraries did not load: libQnnHtp.so: dlopen failed: library \"libcdsprpc.so\" not found; " +
                    "libQnnHtpV79Stub.so: dlopen failed: cannot locate symbol",
                d.reason,
            )
            assertEquals(4, host.calls.size, "every library is tried even after one failed")
            assertEquals("cpu/det.onnx", d.paths["det"])
        },
        "an Android 11 phone is identified through ro.board.platform" to {
            Build.VERSION.SDK_INT = 30
            Build.SOC_MODEL = "must not be read below API 31"
            val props = mapOf("ro.board.platform" to "kalama")
            val device = QnnRuntime.deviceIdentity { props[it] }
            assertEquals(DeviceIdentity(null, "kalama", 30), device)
            val d = QnnSelector.decide(m, device, FakeHost(), LIB_DIR)
            assertTrue(d.npu, d.reason)
            assertEquals("SM8550" to "ro.board.platform", d.soc to d.identifiedBy)
            Build.VERSION.SDK_INT = 35
            Build.SOC_MODEL = "SM8750P"
            val modern = QnnRuntime.deviceIdentity { check(it != "ro.soc.model") { "Build.SOC_MODEL is read on API 31+" }; null }
            assertEquals(SocIdentity(soc = "SM8750", identifiedBy = "Build.SOC_MODEL"), QnnSelector.identify(modern))
        },
        "ADSP_LIBRARY_PATH is prepended with ';' and keeps existing entries and the vendor DSP folders" to {
            val host = FakeHost(env = mapOf("ADSP_LIBRARY_PATH" to "/odm/lib/rfsa/adsp;/vendor/dsp/cdsp"))
            val d = QnnSelector.decide(m, sm8750, host, LIB_DIR)
            val entries = host.env["ADSP_LIBRARY_PATH"]!!.split(";")
            assertEquals(listOf(LIB_DIR, "/odm/lib/rfsa/adsp", "/vendor/dsp/cdsp"), entries.take(3))
            assertTrue(entries.containsAll(listOf("/vendor/lib/rfsa/adsp", "/system/lib/rfsa/adsp", "/dsp")))
            assertEquals(entries.size, entries.toSet().size, "no entry twice")
            assertEquals(d.adspLibraryPath, host.env["ADSP_LIBRARY_PATH"])
            assertEquals(d.adspLibraryPath, QnnSelector.adspLibraryPath(LIB_DIR, d.adspLibraryPath), "idempotent")
        },
        "a manifest of an unknown format version goes to the CPU with that reason; version 1 is still read" to {
            val host = FakeHost()
            val newer = BundleManifest.FORMAT_VERSION + 1
            val d = QnnSelector.decide(m.copy(formatVersion = newer), sm8750, host, LIB_DIR)
            assertFalse(d.npu)
            assertEquals(
                "bundle manifest format \"qnndeploy-bundle\" version $newer is not supported (this app reads " +
                    "\"qnndeploy-bundle\" versions 1 to ${BundleManifest.FORMAT_VERSION}): scaffold again",
                d.reason,
            )
            assertEquals(emptyList(), host.calls)
            assertTrue(QnnSelector.decide(m.copy(formatVersion = 1L), sm8750, FakeHost(), LIB_DIR).npu)
        },
        "a remembered failure gives the CPU until the app or bundle version changes" to {
            val failed = RememberedFailure("1.0 (1) 1", "demo 1.0.0", "QNN error 1008")
            val same = QnnSelector.decide(m, sm8750, FakeHost(), LIB_DIR, appVersion = "1.0 (1) 1", remembered = failed)
            assertFalse(same.npu)
            assertContains(same.reason, "NPU init failed before with this app and bundle version (QNN error 1008)")
            assertTrue(QnnSelector.decide(m, sm8750, FakeHost(), LIB_DIR, appVersion = "1.1 (2) 5", remembered = failed).npu)
            val newBundle = m.copy(version = "1.0.1")
            assertTrue(QnnSelector.decide(newBundle, sm8750, FakeHost(), LIB_DIR, appVersion = "1.0 (1) 1", remembered = failed).npu)
        },
        "failure memory: a pending mark of an ended process is retried once, and counts as a crash the second time" to {
            val file = File(scratch, "memory/npu-failure.json")
            val self = ProcessStamp.of(Process.myPid())
            assertTrue(self.start >= 0 && self.running(), "this process is found in /proc: $self")
            val memory = FailureMemory(file, self)
            assertNull(memory.read())
            memory.begin("1.0 (1) 1", "demo 1.0.0")
            assertNull(FailureMemory(file, self).read(), "this process's own mark is an init under way")
            val child = ProcessBuilder("sleep", "600").start()
            val other = ProcessStamp.of(child.pid().toInt())
            try {
                FailureMemory(file, other).begin("1.0 (1) 1", "demo 1.0.0")
                assertNull(memory.read(), "so is the mark of another process that still runs")
            } finally {
                child.destroy()
                child.waitFor()
            }
            assertNull(memory.read(), "an init whose process ended once (the app closed mid-compile) is tried again")
            // the retry, by a process that had this pid before this one (not this one): it ends inside init too
            val earlier = self.copy(start = self.start + 1)
            FailureMemory(file, earlier).begin("1.0 (1) 1", "demo 1.0.0")
            val crashed = memory.read()!!
            assertEquals("1.0 (1) 1" to "demo 1.0.0", crashed.appVersion to crashed.bundleVersion)
            assertContains(crashed.message, "stopped during NPU init twice in a row")
            FailureMemory(file, earlier).begin("1.1 (2) 1", "demo 1.0.0")
            assertNull(memory.read(), "a new app version starts counting again")
            file.writeText("""{"app_version":"1.0 (1) 1","bundle_version":"demo 1.0.0","pending":true}""")
            assertNotNull(memory.read(), "a mark that names no process (an older glue's) counts as a crash")
            memory.failed("1.0 (1) 1", "demo 1.0.0", "Failed to create context from binary")
            assertEquals("Failed to create context from binary", memory.read()!!.message)
            memory.succeeded()
            assertNull(memory.read())
        },
        "concurrent selects share one selection: one thread's NPU init is no crash for another" to {
            QnnRuntime.forget()
            Build.VERSION.SDK_INT = 35
            Build.SOC_MODEL = "SM8750"
            val context = FakeContext(assets, File(scratch, "app3"), LIB_DIR, "com.example.qnnsample")
            val first = QnnRuntime.select(context, FileFormat.ORT_EPCONTEXT)
            var second: Selection? = null
            val other = first.guardNpuInit {
                // a second screen (a rotation) selects while this thread's NPU init is under way
                thread { second = QnnRuntime.select(context, FileFormat.ORT_EPCONTEXT) }
                    .also { waitUntilDoneOrBlockedBy(it, Thread.currentThread()) }
            }
            other.join()
            val shared = second!!
            assertSame(first, shared, "one selection per process")
            assertFalse("failed before" in shared.decision.reason, shared.decision.reason)
            val cpu = first.toCpu(Reasons.npuInitFailed(error = "QNN error 1002"))
            assertEquals("npu_init_failed" to "NPU init failed: QNN error 1002", cpu.decision.reasonKey to cpu.decision.reason)
            assertSame(cpu, QnnRuntime.select(context, FileFormat.ORT_EPCONTEXT), "after a fallback, select gives the CPU one")
            assertSame(cpu, first.toCpu(Reasons.npuInitFailed(error = "again")), "one fallback")
        },
        "bundle files are copied from the assets only when their sha256 differs" to {
            val root = File(scratch, "files")
            var opened = 0
            val files = BundleFiles(root) { opened++; FileInputStream(File(assets, "qnndeploy/$it")) }
            val manifest = BundleManifest.parse(File(assets, "qnndeploy/manifest.json").readText())
            val wanted = listOf("cpu/det.onnx", "npu/SM8750/det.bin", "npu/SM8750/det_ctx.onnx")
            assertEquals(wanted, files.materialize(manifest, wanted))
            for (p in wanted) assertEquals(sha256(File(assets, "qnndeploy/$p")), sha256(files.file(p)))
            opened = 0
            assertEquals(emptyList(), files.materialize(manifest, wanted), "nothing to copy the second time")
            assertEquals(0, opened, "and no asset opened")
            files.file("npu/SM8750/det.bin").appendBytes(byteArrayOf(1))
            assertEquals(listOf("npu/SM8750/det.bin"), files.materialize(manifest, wanted))
            val damaged = BundleFiles(File(scratch, "damaged")) { "not the model".byteInputStream() }
            val e = assertFailsWith<IOException> { damaged.materialize(manifest, listOf("cpu/det.onnx")) }
            assertContains(e.message!!, "the manifest says")
            assertFalse(damaged.file("cpu/det.onnx").exists(), "a damaged copy is not left behind")
        },
        "the CPU fallback copies each model's external data file beside it, checked like the others" to {
            val manifest = BundleManifest.parse(File(assets, "qnndeploy/manifest.json").readText())
            val cpu = QnnSelector.cpu(manifest, SocIdentity(), Reasons.npuInitFailed(error = "no NPU"))
            assertEquals(mapOf("det" to "cpu/det.onnx", "rec" to "cpu/rec.onnx"), cpu.paths, "the models, not their data")
            assertEquals(listOf("cpu/det.onnx", "cpu/rec.onnx", "cpu/rec.onnx.data"), cpu.files)
            val files = BundleFiles(File(scratch, "external")) { FileInputStream(File(assets, "qnndeploy/$it")) }
            assertEquals(cpu.files, files.materialize(manifest, cpu.files))
            val model = files.file("cpu/rec.onnx")
            assertEquals(File(model.parentFile, "rec.onnx.data"), files.file("cpu/rec.onnx.data"), "where the model names it")
            assertEquals(sha256(File(assets, "qnndeploy/cpu/rec.onnx.data")), sha256(files.file("cpu/rec.onnx.data")))
            val damaged = BundleFiles(File(scratch, "external-damaged")) {
                if (it.endsWith(".data")) "not the weights".byteInputStream() else FileInputStream(File(assets, "qnndeploy/$it"))
            }
            val e = assertFailsWith<IOException> { damaged.materialize(manifest, cpu.files) }
            assertContains(e.message!!, "cpu/rec.onnx.data in the app's assets has sha256")
            assertFalse(damaged.file("cpu/rec.onnx.data").exists(), "a damaged copy is not left behind")
        },
        "bundle files: what the bundle does not list is deleted from their folder, and nothing outside it" to {
            val base = File(scratch, "prune")
            val root = File(base, "qnndeploy")
            val outside = File(base, "outside.txt").apply { parentFile.mkdirs(); writeText("the app's") }
            val outsideDir = File(base, "outside-dir").apply { mkdirs(); File(this, "keep.bin").writeText("the app's") }
            val files = BundleFiles(root, setOf("npu-failure.json")) { FileInputStream(File(assets, "qnndeploy/$it")) }
            val manifest = BundleManifest.parse(File(assets, "qnndeploy/manifest.json").readText())
            files.materialize(manifest, listOf("cpu/det.onnx", "npu/SM8750/det_ctx.onnx"))
            val old = listOf("npu/SM8450/det.bin", "npu/SM8450/det.bin.sha256", "cpu/encoder.onnx", "cpu/.det.onnx.1.partial")
            for (path in old) files.file(path).apply { parentFile.mkdirs(); writeText("older bundle") }
            File(root, "npu-failure.json").writeText("{}")
            Files.createSymbolicLink(files.file("cpu/outside.txt").toPath(), outside.toPath())
            Files.createSymbolicLink(files.file("outside-dir").toPath(), outsideDir.toPath())
            assertEquals(emptyList(), files.materialize(manifest, listOf("cpu/det.onnx")))
            val kept = setOf("cpu/det.onnx", "cpu/det.onnx.sha256", "npu/SM8750/det_ctx.onnx", "npu/SM8750/det_ctx.onnx.sha256",
                "npu-failure.json", ".lock")
            assertEquals(kept, tree(root), "the bundle's files (also those this start did not need) and the kept names")
            assertFalse(File(root, "npu/SM8450").exists(), "a folder left empty goes too")
            assertEquals("the app's", outside.readText())
            assertEquals("the app's", File(outsideDir, "keep.bin").readText(), "links are not followed")
            assertEquals(emptyList(), files.prune(manifest))
        },
        "bundle files: two threads copying the same file both get it" to {
            val root = File(scratch, "race")
            val manifest = BundleManifest.parse(File(assets, "qnndeploy/manifest.json").readText())
            val path = listOf("cpu/det.onnx")
            val main = Thread.currentThread()
            var other: Thread? = null
            var otherFailed: Throwable? = null
            val slow = BundleFiles(root) {
                // while this copy is under way, another thread (another screen) copies the same file
                val copying = thread {
                    try {
                        BundleFiles(root) { FileInputStream(File(assets, "qnndeploy/$it")) }.materialize(manifest, path)
                    } catch (e: Throwable) {
                        otherFailed = e
                    }
                }
                other = copying
                waitUntilDoneOrBlockedBy(copying, main)
                FileInputStream(File(assets, "qnndeploy/$it"))
            }
            slow.materialize(manifest, path)
            other!!.join()
            assertNull(otherFailed)
            assertEquals(sha256(File(assets, "qnndeploy/cpu/det.onnx")), sha256(slow.file("cpu/det.onnx")))
        },
        "select on the JVM: the real System.loadLibrary fails, so the CPU, with the loader's message" to {
            QnnRuntime.forget()
            Build.VERSION.SDK_INT = 35
            Build.SOC_MODEL = "SM8750"
            Os.ENV.clear()
            Log.LINES.clear()
            val context = FakeContext(assets, File(scratch, "app"), LIB_DIR, "com.example.qnnsample")
            val selection = QnnRuntime.select(context, FileFormat.ORT_EPCONTEXT)
            val d = selection.decision
            assertFalse(d.npu)
            assertContains(d.reason, "QNN libraries did not load: libQnnSystem.so: no QnnSystem in java.library.path")
            assertEquals(LIB_DIR, Os.ENV["ADSP_LIBRARY_PATH"]!!.substringBefore(';'), "set through android.system.Os")
            val model = File(selection.path("det"))
            assertEquals(sha256(File(assets, "qnndeploy/cpu/det.onnx")), sha256(model))
            assertTrue(Log.LINES.any { it == "qnndeploy: decision ${d.toJson()}" }, "the decision is logged as JSON")
        },
        "a failed NPU init is remembered and the next start goes to the CPU" to {
            Build.VERSION.SDK_INT = 35
            Build.SOC_MODEL = "SM8750"
            QnnRuntime.forget()
            val context = FakeContext(assets, File(scratch, "app2"), LIB_DIR, "com.example.qnnsample")
            val first = QnnRuntime.select(context, FileFormat.ORT_EPCONTEXT)
            assertFailsWith<IllegalStateException> { first.guardNpuInit { throw IllegalStateException("QNN error 5000") } }
            var tried = false
            assertFailsWith<IllegalStateException> { first.guardNpuInit { tried = true } }
            assertFalse(tried, "a failed NPU init is not tried again in the same process")
            val cpu = first.toCpu(Reasons.npuInitFailed(error = "QNN error 5000"))
            assertEquals("cpu/det.onnx", cpu.decision.paths["det"])
            QnnRuntime.forget() // the next start
            val again = QnnRuntime.select(context, FileFormat.ORT_EPCONTEXT)
            assertContains(again.decision.reason, "NPU init failed before with this app and bundle version (QNN error 5000)")
            QnnRuntime.forget()
            context.updated = 2L
            assertFalse("failed before" in QnnRuntime.select(context, FileFormat.ORT_EPCONTEXT).decision.reason,
                "an app update retries the NPU")
        },
        "the QNN EP is given the target's soc_model and htp_arch on the NPU, never left to detect them" to {
            for ((phone, want) in listOf("SM8750-AC" to ("69" to "79"), "sm8750p" to ("69" to "79"), "SM8550-AC" to ("43" to "73"))) {
                val d = QnnSelector.decide(m, DeviceIdentity(phone, null, 35), FakeHost(), LIB_DIR, FileFormat.ORT_EPCONTEXT)
                assertTrue(d.npu, d.reason)
                OrtModels.sessionOptions(d, "burst", plugin = null).use { options ->
                    assertEquals(
                        mapOf(
                            "backend_path" to "libQnnHtp.so", "htp_performance_mode" to "burst",
                            "soc_model" to want.first, "htp_arch" to want.second,
                        ),
                        options.standInQnnOptions,
                        phone,
                    )
                }
            }
            val cpu = QnnSelector.decide(m, DeviceIdentity("SM8650", null, 35), FakeHost(), LIB_DIR)
            assertEquals(null to null, cpu.socId to cpu.dspArch)
            OrtModels.sessionOptions(cpu, "burst").use { assertNull(it.standInQnnOptions, "no QNN EP on the CPU") }
            val unnamed = QnnSelector.decide(m, sm8750, FakeHost(), LIB_DIR).copy(socId = null)
            assertFailsWith<IllegalStateException> { OrtModels.qnnOptions(unnamed, "burst") }
        },
        "qnnLibraries drops one leading v, whatever the arch string (as the Python twin does)" to {
            assertEquals(
                QnnLibraries("libQnnHtp.so", "libQnnSystem.so", "libQnnHtpV79Stub.so", "libQnnHtpV79Skel.so"),
                QnnSelector.qnnLibraries("v79"),
            )
            assertEquals("libQnnHtpV79Stub.so", QnnSelector.qnnLibraries("79").stub)
            assertEquals("libQnnHtpVv79Skel.so", QnnSelector.qnnLibraries("vv79").skel)
            assertEquals("libQnnHtpVStub.so", QnnSelector.qnnLibraries("").stub)
        },
        "a context binary shared by several graphs (format 3) serves each of them" to {
            val shared = BundleManifest.from(manifests["shared"])
            val binary = shared.targets[1].artifacts.first()
            assertEquals(listOf("npu/SM8750/pair.bin", "", "det,rec"), listOf(binary.path, binary.graph, binary.graphs.joinToString(",")))
            assertTrue(binary.serves("det") && binary.serves("rec") && !binary.serves("pair"))
            assertEquals("sustained_high_performance" to null, shared.htpPerformanceMode to m.htpPerformanceMode)
            val d = QnnSelector.decide(shared, sm8750, FakeHost(), LIB_DIR, FileFormat.QNN_CONTEXT_BINARY)
            assertEquals(mapOf("det" to "npu/SM8750/pair.bin", "rec" to "npu/SM8750/pair.bin"), d.paths)
            assertEquals(1, d.files.count { it == "npu/SM8750/pair.bin" })
        },
        "the manifest is parsed once into typed classes; a damaged one says what is wrong" to {
            assertEquals(listOf("SM8550", "SM8750"), bundled.targets.map { it.soc })
            val target = bundled.targets[1]
            assertEquals("v79", target.dspArch)
            val det = target.artifacts.first()
            assertEquals(listOf("npu/SM8750/det.bin", "det"), listOf(det.path, det.graph))
            assertEquals(FileFormat.QNN_CONTEXT_BINARY, det.format)
            assertEquals(RuntimeMode.BUNDLED to RuntimeMode.EXTERNAL, bundled.runtime.mode to m.runtime.mode)
            assertTrue(bundled.runtime.libs.any { it.path == "lib/hexagon-v79/libQnnHtpV79Skel.so" && it.format == null })
            assertEquals(listOf(Tensor("x", "float32", listOf(1L, 16L))), m.graphs[0].inputs)
            assertEquals(listOf(FileFormat.ONNX, FileFormat.ONNX), m.cpu.map { it.format })
            assertEquals("demo 1.0.0", m.bundleVersion)
            val raw = manifests["two_targets"] as Map<*, *>
            val newer = BundleManifest.from(raw + ("format_version" to BundleManifest.FORMAT_VERSION + 1))
            assertFalse(newer.supported)
            assertEquals(emptyList(), newer.targets, "a format this app does not read is not parsed further")
            val damaged = raw + ("targets" to listOf(mapOf("soc" to "SM8750", "soc_id" to 69L, "artifacts" to emptyList<Any>())))
            assertContains(assertFailsWith<IllegalArgumentException> { BundleManifest.from(damaged) }.message!!, "\"dsp_arch\"")
            val noSocId = raw + ("targets" to listOf(mapOf("soc" to "SM8750", "soc_id" to "69", "dsp_arch" to "v79")))
            assertContains(assertFailsWith<IllegalArgumentException> { BundleManifest.from(noSocId) }.message!!, "\"soc_id\"")
            assertEquals(listOf(43L, 69L), bundled.targets.map { it.socId })
            assertFailsWith<IllegalArgumentException> { BundleManifest.parse("[]") }
        },
        "a failure to set ADSP_LIBRARY_PATH gives the CPU, and no QNN library is loaded" to {
            val host = FakeHost(setenvError = "setenv failed: EINVAL (Invalid argument)")
            val d = QnnSelector.decide(m, sm8750, host, LIB_DIR)
            assertEquals(Provider.CPU to "adsp_not_set", d.provider to d.reasonKey)
            assertEquals("cannot set ADSP_LIBRARY_PATH: setenv failed: EINVAL (Invalid argument)", d.reason)
            assertEquals(listOf("setenv ADSP_LIBRARY_PATH"), host.calls)
            assertNull(d.adspLibraryPath)
        },
        "select with loading libraries gives the NPU and copies its files; NPU files it cannot copy give the CPU" to {
            Build.VERSION.SDK_INT = 35
            Build.SOC_MODEL = "SM8750"
            QnnRuntime.forget()
            QnnRuntime.host = FakeHost()
            try {
                val npu = QnnRuntime.select(
                    FakeContext(assets, File(scratch, "app5"), LIB_DIR, "com.example.qnnsample"), FileFormat.ORT_EPCONTEXT,
                )
                assertEquals(Provider.NPU, npu.decision.provider, npu.decision.reason)
                assertEquals(sha256(File(assets, "qnndeploy/npu/SM8750/det_ctx.onnx")), sha256(File(npu.path("det"))))
                QnnRuntime.forget()
                val partial = File(scratch, "assets-without-an-npu-file")
                assets.copyRecursively(partial)
                File(partial, "qnndeploy/npu/SM8750/det_ctx.onnx").delete()
                val d = QnnRuntime.select(
                    FakeContext(partial, File(scratch, "app6"), LIB_DIR, "com.example.qnnsample"), FileFormat.ORT_EPCONTEXT,
                ).decision
                assertEquals(Provider.CPU to "files_not_copied", d.provider to d.reasonKey)
                assertContains(d.reason, "the NPU files could not be put in app storage: cannot copy npu/SM8750/det_ctx.onnx")
                assertEquals("cpu/det.onnx", d.paths["det"])
            } finally {
                QnnRuntime.host = AndroidHost
                QnnRuntime.forget()
            }
        },
        "a runtime older than the bundle's qairt.min_runtime gives the CPU; the version is in the JSON log line" to {
            val raw = manifests["two_targets"] as Map<*, *>
            val qairt = (raw["qairt"] as Map<*, *>) + ("min_runtime" to "2.49.0")
            val needs249 = BundleManifest.from(raw + ("qairt" to qairt))
            assertEquals("2.49.0", needs249.qairt.minRuntime)
            assertNull(m.qairt.minRuntime, "a bundle from before min_runtime")
            val old = QnnSelector.decide(needs249, sm8750, FakeHost(runtimeVersion = "2.48.9"), LIB_DIR)
            assertEquals(Provider.CPU to "runtime_too_old", old.provider to old.reasonKey)
            assertEquals(
                "the QNN runtime that loaded is QAIRT 2.48.9, older than QAIRT 2.49.0 that this bundle's context " +
                    "binaries need",
                old.reason,
            )
            assertContains(old.toJson(), "\"runtime_version\":\"2.48.9\"")
            assertTrue(QnnSelector.decide(needs249, sm8750, FakeHost(runtimeVersion = "2.51.0"), LIB_DIR).npu)
            assertTrue(QnnSelector.decide(needs249, sm8750, FakeHost(), LIB_DIR).npu, "unknown: the NPU")
            assertTrue(QnnSelector.runtimeTooOld("2.9.0", "2.10.0"), "numbers, not text")
            assertFalse(QnnSelector.runtimeTooOld("2.48", "2.49.0"), "a malformed version refuses nothing")
            val throwing = object : NativeHost by FakeHost() {
                override fun qnnRuntimeVersion(): String? = throw SecurityException("no /proc")
            }
            assertEquals(null to true, QnnSelector.decide(needs249, sm8750, throwing, LIB_DIR).let { it.runtimeVersion to it.npu })
        },
        "MiniJson reads the manifest strictly, bounded in depth, and writes like Python's json.dumps" to {
            val value = MiniJson.parse("""{"a": [1, 2.5, true, null], "s": "\u00e9\n\"x\"", "n": -3e2}""") as Map<*, *>
            assertEquals(listOf(1L, 2.5, true, null), value["a"])
            assertEquals("\u00e9\n\"x\"", value["s"])
            assertEquals(-300.0, value["n"])
            assertEquals("""{"a":[1,2.5,true,null],"s":"\u00e9\n\"x\"","n":-300.0}""", MiniJson.write(value))
            assertFailsWith<IllegalArgumentException> { MiniJson.parse("""{"a": 1,}""") }
            assertFailsWith<IllegalArgumentException> { MiniJson.parse("[1] x") }
            val deepest = "[".repeat(MiniJson.MAX_DEPTH) + "]".repeat(MiniJson.MAX_DEPTH)
            assertTrue(MiniJson.parse(deepest) is List<*>, "${MiniJson.MAX_DEPTH} levels parse")
            assertFailsWith<IllegalArgumentException> { MiniJson.parse("[$deepest]") }
            // a hostile file: refused as bad JSON, not a StackOverflowError that would crash the app
            assertFailsWith<IllegalArgumentException> { MiniJson.parse("[".repeat(100_000)) }
        },
    )
}

fun sha256(file: File): String =
    MessageDigest.getInstance("SHA-256").digest(file.readBytes()).joinToString("") { "%02x".format(it) }

fun main(args: Array<String>) {
    val suite = Suite(MiniJson.parse(File(args[0]).readText()) as Map<*, *>, File(args[1]), File(args[2]))
    runTests(suite.tests())
}
