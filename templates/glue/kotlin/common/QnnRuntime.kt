package com.example.qnnsample.qnndeploy

import android.content.Context
import android.content.res.AssetManager
import android.os.Build
import android.os.Process
import android.system.Os
import android.util.Log
import java.io.File
import java.io.IOException
import java.io.InputStream
import java.util.concurrent.atomic.AtomicBoolean

/** The process as the selector sees it on Android: the libc environment and the app's native libraries. */
internal object AndroidHost : NativeHost {
    override fun getenv(name: String): String? = Os.getenv(name)

    override fun setenv(name: String, value: String) = Os.setenv(name, value, true)

    override fun loadLibrary(fileName: String) = System.loadLibrary(fileName.removePrefix("lib").removeSuffix(".so"))

    /** From the build marker in the file /proc/self/maps shows behind libQnnHtp.so (RuntimeVersion); null if none. */
    override fun qnnRuntimeVersion(): String? = try {
        RuntimeVersion.fromMaps(File("/proc/self/maps").readText())
    } catch (e: IOException) {
        null
    }
}

/**
 * An AI pack that carries the NPU files (scaffold --play, whose glue has the Play file): Generated.AI_PACK, null
 * without one. The glue without Play compiles and runs without it.
 */
internal interface AiPack {
    /** Opens a bundle file among the APK's assets: the CPU models are the base module's, NPU files a pack's. */
    fun open(assets: AssetManager, manifest: BundleManifest, path: String): InputStream

    /** The decision once the pack was looked at: the CPU while the pack is not on the phone or not this SoC's. */
    fun place(context: Context, manifest: BundleManifest, decision: Decision): PackPlacement
}

/** Where a decision's NPU files are in the AI pack (bundle path -> file), and the decision log line with the pack. */
internal interface PackPlacement {
    val decision: Decision
    val files: Map<String, File>

    /** The same placement without files in the pack: the decision went to the CPU after all. */
    fun withoutFiles(decision: Decision): PackPlacement

    fun logLine(decision: Decision): String
}

/**
 * What the app runs with: the decision, the bundle's files in app storage, and how NPU init went. There is one per
 * process (QnnRuntime.select gives every caller the same), so its NPU init is tried once and its fallback shared.
 */
class Selection internal constructor(
    val decision: Decision,
    val manifest: BundleManifest,
    internal val files: BundleFiles,
    private val memory: FailureMemory,
    internal val appVersion: String,
    /** the app's native library folder, where the Skel is */
    internal val libDir: String,
    internal val npuFormat: FileFormat,
    /** with an AI pack: the NPU files used where Play put them, and the decision log's "play" object */
    internal val pack: PackPlacement? = null,
) {
    internal val bundleVersion: String get() = manifest.bundleVersion

    private var npuFailure: Throwable? = null
    private var fallback: Selection? = null

    /**
     * Whether graphs of the chosen target share one context binary (compile --share): their sessions must then
     * share the loaded context (ONNX Runtime's ep.share_ep_contexts), or each would load the whole binary again.
     */
    internal val sharesContext: Boolean
        get() = decision.npu && manifest.targets.any { t -> t.artifacts.any { it.graphs.size > 1 && it.path in decision.files } }

    /** The absolute path of the model to load for a graph (a context binary, an EPContext .onnx or an .onnx). */
    internal fun path(graph: String): String {
        val path = decision.paths[graph] ?: throw IllegalArgumentException("graph '$graph' is not in this decision")
        return (pack?.files?.get(path) ?: files.file(path)).absolutePath
    }

    /**
     * The absolute path of the bundle's tokenizer file (its decode loop's or its generation's: sherpa-onnx's
     * tokens.txt or a tokenizer.json), copied to app storage and checked against the manifest's sha256 on first use;
     * null when the bundle has none.
     */
    fun tokenizerPath(): String? {
        val tokenizer = manifest.loop?.tokenizer ?: manifest.generation?.tokenizer ?: return null
        files.materialize(manifest, listOf(tokenizer.path))
        return files.file(tokenizer.path).absolutePath
    }

    /**
     * Runs NPU init so that a failure, or a crash in the middle of it, sends the next starts to the CPU. One init at
     * a time in the process; once one failed, later calls get the same failure without trying again.
     */
    internal fun <T> guardNpuInit(init: () -> T): T = synchronized(QnnRuntime.lock) {
        npuFailure?.let { throw it }
        memory.begin(appVersion, bundleVersion)
        val result = try {
            init()
        } catch (e: Throwable) {
            npuFailure = e
            memory.failed(appVersion, bundleVersion, e.message ?: e.javaClass.name)
            throw e
        }
        memory.succeeded()
        result
    }

    /**
     * The CPU selection to use after the NPU failed to initialize (reason: Reasons.npuInitFailed with the error);
     * from then on QnnRuntime.select returns it.
     */
    internal fun toCpu(reason: Reason): Selection = synchronized(QnnRuntime.lock) {
        fallback?.let { return it }
        val identity = SocIdentity(soc = decision.soc, identifiedBy = decision.identifiedBy)
        val cpu = QnnSelector.cpu(
            manifest, identity, reason, adsp = decision.adspLibraryPath, runtimeVersion = decision.runtimeVersion,
        )
        files.materialize(manifest, cpu.files)
        val cpuPack = pack?.withoutFiles(cpu)
        Log.i(QnnRuntime.TAG, "decision ${cpuPack?.logLine(cpu) ?: cpu.toJson()}")
        val selection = Selection(
            decision = cpu, manifest = manifest, files = files, memory = memory, appVersion = appVersion,
            libDir = libDir, npuFormat = npuFormat, pack = cpuPack,
        )
        fallback = selection
        QnnRuntime.replace(this, selection)
        selection
    }
}

internal object QnnRuntime {
    const val TAG = "qnndeploy"

    /** The bundle's folder inside the APK's assets (qnndeploy.gradle puts it there). */
    const val ASSETS = "qnndeploy"

    /** The file of FailureMemory, in the storage folder of BundleFiles. */
    private const val MEMORY = "npu-failure.json"

    /** One selection, NPU init and file copy at a time in the process. */
    internal val lock = Any()

    /** The process the selector sets the environment of and loads libraries into: AndroidHost; tests replace it. */
    internal var host: NativeHost = AndroidHost
    private val selections = HashMap<FileFormat, Selection>() // npuFormat -> this process's selection

    /** Set when the AI pack arrived: the next select decides again (without waiting for a select in progress). */
    private val packChanged = AtomicBoolean(false)

    /**
     * Decides NPU or CPU for this phone and puts the chosen model files in app storage. Call it before anything
     * loads a QNN library: it sets ADSP_LIBRARY_PATH first. It logs the decision as one JSON line (tag qnndeploy).
     * npuFormat: FileFormat.ORT_EPCONTEXT for ONNX Runtime, FileFormat.QNN_CONTEXT_BINARY for sherpa-onnx or QNN
     * itself. It decides once per process: every later or concurrent call gets the same Selection (or its CPU
     * fallback). With the NPU files in an AI pack (scaffold --play): the CPU until the pack is on the phone, then the
     * NPU from the next select on; models already open keep running where they are.
     * platform: what the loaded QNN backend reports as the platform (see Platform), used only for a SoC the catalog
     * does not know; null (the default) when the app cannot read it.
     */
    fun select(context: Context, npuFormat: FileFormat, platform: Platform? = null): Selection = synchronized(lock) {
        if (packChanged.getAndSet(false)) selections.clear()
        selections.getOrPut(npuFormat) { decide(context, npuFormat, platform) }
    }

    /** The AI pack arrived (the Play file's listener): the next select decides again. */
    internal fun packArrived() = packChanged.set(true)

    private fun decide(context: Context, npuFormat: FileFormat, platform: Platform?): Selection {
        val assets = context.assets // not the context: the selection outlives an Activity
        val text = try {
            assets.open("$ASSETS/manifest.json").use { it.readBytes().decodeToString() }
        } catch (e: IOException) {
            throw IllegalStateException("assets/$ASSETS/manifest.json is missing: apply qnndeploy.gradle in the app", e)
        }
        val manifest = try {
            BundleManifest.parse(text)
        } catch (e: IllegalArgumentException) {
            throw IllegalStateException("assets/$ASSETS/manifest.json is damaged (${e.message}): scaffold again", e)
        }
        val root = File(context.filesDir, "qnndeploy")
        val aiPack = Generated.AI_PACK
        val files = BundleFiles(root, setOf(MEMORY, "$MEMORY.partial")) {
            aiPack?.open(assets, manifest, it) ?: assets.open("$ASSETS/$it")
        }
        val memory = FailureMemory(File(root, MEMORY), ProcessStamp.of(Process.myPid()))
        val appVersion = appVersion(context)
        val libDir = context.applicationInfo.nativeLibraryDir
        var decision = QnnSelector.decide(
            manifest = manifest,
            device = deviceIdentity(),
            host = host,
            libDir = libDir,
            npuFormat = npuFormat,
            appVersion = appVersion,
            remembered = memory.read(),
            platform = platform,
            compilesOnnx = npuFormat == FileFormat.ORT_EPCONTEXT, // only ONNX Runtime's QNN EP compiles on the phone
        )
        var pack = aiPack?.place(context, manifest, decision)
        decision = pack?.decision ?: decision
        try {
            files.materialize(manifest, decision.files - pack?.files?.keys.orEmpty())
        } catch (e: IOException) {
            if (!decision.npu) throw e
            val identity = SocIdentity(soc = decision.soc, identifiedBy = decision.identifiedBy)
            val reason = Reasons.filesNotCopied(error = e.message ?: e.javaClass.name)
            decision = QnnSelector.cpu(
                manifest, identity, reason, adsp = decision.adspLibraryPath, runtimeVersion = decision.runtimeVersion,
            )
            files.materialize(manifest, decision.files)
            pack = pack?.withoutFiles(decision)
        }
        Log.i(TAG, "decision ${pack?.logLine(decision) ?: decision.toJson()}")
        return Selection(
            decision = decision, manifest = manifest, files = files, memory = memory, appVersion = appVersion,
            libDir = libDir, npuFormat = npuFormat, pack = pack,
        )
    }

    internal fun replace(old: Selection, new: Selection) = synchronized(lock) {
        if (selections[old.npuFormat] === old) selections[old.npuFormat] = new
    }

    /** Forgets the selections, as a new process would start: for tests; an app has no use for it. */
    internal fun forget() = synchronized(lock) { selections.clear() }

    /** Sets ADSP_LIBRARY_PATH again (no-op when nothing changed it since select), for code that must be sure. */
    fun applyAdspLibraryPath(selection: Selection) {
        val current = host.getenv(QnnSelector.ADSP_VAR)
        host.setenv(QnnSelector.ADSP_VAR, QnnSelector.adspLibraryPath(selection.libDir, current))
    }

    /** Build.SOC_MODEL on Android 12+, else ro.soc.model; ro.board.platform for phones that have neither. */
    fun deviceIdentity(getprop: (String) -> String? = ::systemProperty): DeviceIdentity {
        val soc = if (Build.VERSION.SDK_INT >= Build.VERSION_CODES.S) Build.SOC_MODEL else getprop("ro.soc.model")
        return DeviceIdentity(soc, getprop("ro.board.platform"), Build.VERSION.SDK_INT)
    }

    /** A system property through the getprop tool: apps may read ro.* properties, and no hidden API is used. */
    fun systemProperty(name: String): String? = try {
        val process = ProcessBuilder("getprop", name).redirectErrorStream(true).start()
        val value = process.inputStream.bufferedReader().use { it.readText() }.trim()
        process.waitFor()
        value.ifEmpty { null }
    } catch (e: IOException) {
        null
    }

    /** Changes with every update or reinstall of the app, so a remembered NPU failure is retried after one. */
    @Suppress("DEPRECATION")
    fun appVersion(context: Context): String {
        val info = context.packageManager.getPackageInfo(context.packageName, 0)
        val code = if (Build.VERSION.SDK_INT >= Build.VERSION_CODES.P) info.longVersionCode else info.versionCode.toLong()
        return "${info.versionName} ($code) ${info.lastUpdateTime}"
    }
}
