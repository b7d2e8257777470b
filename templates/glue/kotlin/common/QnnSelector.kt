package com.example.qnnsample.qnndeploy

// NPU or CPU for this phone: the on-device decision of qnndeploy, in plain Kotlin (no Android imports), so it runs
// and is tested on any JVM. Its twin is qnndeploy/decision.py; the two must agree, reason strings included (those
// come from one source, Reasons.kt). Text is compared with ASCII rules only (trimAscii, uppercaseAscii), as the
// twin does: Python's and the JVM's Unicode tables differ.

enum class Provider {
    NPU,
    CPU,
    ;

    /** "npu" or "cpu", as in the decision's JSON line */
    val id: String get() = name.lowercase()
}

/** What the phone says about its chip. socModel: Build.SOC_MODEL on Android 12+, else the ro.soc.model property. */
internal data class DeviceIdentity(val socModel: String?, val boardPlatform: String?, val sdkInt: Int)

/**
 * The phone's SoC as the selector found it: the catalog model (SM8750 for an SM8750P) or what the phone reported,
 * and the property that said so (Build.SOC_MODEL, ro.soc.model or ro.board.platform). Both null: it reports none.
 */
internal data class SocIdentity(val soc: String? = null, val identifiedBy: String? = null)

/** The QNN library file names of one HTP arch: QNN loads the Stub and the Skel by exactly these names. */
internal data class QnnLibraries(
    val backend: String = Generated.BACKEND_LIB,
    val system: String = Generated.SYSTEM_LIB,
    val stub: String,
    val skel: String,
)

/**
 * What the loaded QNN backend reports as the platform (QNN's QnnDevice_getPlatformInfo: the SoC's soc_model number
 * and HTP arch, "v81"). The decision uses it only for a SoC the catalog does not know, to compile for it on the device.
 * Reading it needs QnnDevice_getPlatformInfo through JNI (QNN has no Java API), which this glue does not ship: an app
 * that has such a call passes what it read; the default is null (unknown), and such a phone takes the CPU.
 */
data class Platform(val socModel: Int, val dspArch: String)

/** Where an NPU decision's model comes from (Decision.npuSource). */
object NpuSource {
    /** a context binary of the bundle, compiled on the host for the phone's SoC (a bundle target) */
    const val PREBUILT = "prebuilt"

    /** the bundle's ONNX, compiled on the phone by ONNX Runtime's QNN EP at first run and cached (manifest on_device) */
    const val ON_DEVICE = "on-device"
}

/** A failed NPU init; it sends the app to the CPU while the app and the bundle stay the same versions. */
internal data class RememberedFailure(val appVersion: String, val bundleVersion: String, val message: String)

/** What the selector needs from the process; on a phone: android.system.Os and System.loadLibrary. */
internal interface NativeHost {
    fun getenv(name: String): String?

    fun setenv(name: String, value: String)

    /** Loads a library by file name (libQnnHtp.so); throws, with the loader's message, when it cannot. */
    fun loadLibrary(fileName: String)

    /** The QAIRT version ("2.51.0") of the libQnnHtp.so that loaded; null when unknown. Asked after the loads. */
    fun qnnRuntimeVersion(): String? = null
}

data class Decision(
    val provider: Provider,
    val soc: String? = null,
    val identifiedBy: String? = null,
    val reason: String,
    /** the reason's key in qnndeploy/data/reasons.json (Reasons.kt): the same on every phone, for logs and tests */
    val reasonKey: String,
    /** the chosen target's HTP arch (on the NPU) */
    val dspArch: String? = null,
    /**
     * the chosen target's QNN soc_model number (on the NPU): passed to the QNN execution provider with the arch,
     * since its own SoC detection fails on some phones (QNN_DEVICE_ERROR_INVALID_CONFIG on an SM8750-AC)
     */
    val socId: Long? = null,
    /** graph -> bundle path of the model to load: a context binary or EPContext .onnx on the NPU, an .onnx on the CPU */
    val paths: Map<String, String> = emptyMap(),
    /** every bundle file this decision needs in app storage (on the CPU: the models and their external data files) */
    val files: List<String> = emptyList(),
    val backendLib: String? = null,
    val systemLib: String? = null,
    /** the ADSP_LIBRARY_PATH value set before the QNN libraries were loaded, if it was set */
    val adspLibraryPath: String? = null,
    /** the QAIRT version of the libQnnHtp.so that loaded (null: unknown, or the libraries were not loaded) */
    val runtimeVersion: String? = null,
    /** on the NPU: the graphs that run on the CPU all the same (the CPU part of a split model) */
    val cpuGraphs: List<String> = emptyList(),
    /** on the NPU: NpuSource.PREBUILT (a bundle target's files) or NpuSource.ON_DEVICE (compiled here); null on the CPU */
    val npuSource: String? = null,
    /** on-device only: the first compile's time budget in seconds (manifest on_device.budget_s) */
    val compileBudgetS: Double? = null,
    /** on-device only: graph -> the QNN EP options of its compile (manifest on_device graphs' ep_options) */
    val epOptions: Map<String, Map<String, String>> = emptyMap(),
) {
    val npu: Boolean get() = provider == Provider.NPU

    /** The same keys as qnndeploy's Python Decision, so a log line can be compared with `qnndeploy device verify`. */
    internal fun toJson(): String = MiniJson.write(
        linkedMapOf(
            "provider" to provider.id, "soc" to soc, "identified_by" to identifiedBy, "reason" to reason,
            "reason_key" to reasonKey, "dsp_arch" to dspArch, "soc_id" to socId, "paths" to paths,
            "files" to files, "backend_lib" to backendLib, "system_lib" to systemLib,
            "adsp_library_path" to adspLibraryPath, "runtime_version" to runtimeVersion, "cpu_graphs" to cpuGraphs,
            "npu_source" to npuSource, "compile_budget_s" to compileBudgetS, "ep_options" to epOptions,
        ),
    )
}

internal object QnnSelector {
    const val ADSP_VAR = "ADSP_LIBRARY_PATH"
    private const val SOC_MODEL_SINCE_SDK = 31

    /** What both twins trim: ASCII whitespace. */
    private const val SPACE = " \t\n\r\u000B\u000C"

    /** A version as both twins compare it: X.Y.Z, ASCII digits, 1 to 9 per part; anything else is no version. */
    private val VERSION = Regex("[0-9]{1,9}\\.[0-9]{1,9}\\.[0-9]{1,9}")

    /**
     * NPU only when the SoC matches a bundle target AND the QNN libraries load; otherwise CPU. Always with a reason.
     * The steps, in order: SoC identity; a target for it, unless it asks for the CPU (acceptedOn "cpu" and a graph
     * whose failed validation was accepted: the first in the manifest's order); ADSP_LIBRARY_PATH; load libQnnSystem, libQnnHtp and the
     * target's Stub (every failure message kept); the loaded runtime not older than the bundle's qairt.minRuntime.
     * A remembered failed NPU init skips the last three steps.
     * A phone whose SoC has no target, with a bundle that has onDevice, is decided by onDevice (the third path:
     * the app compiles the ONNX there); platform is what the loaded QNN backend reports, used only for a SoC the
     * catalog does not know (see Platform); compilesOnnx is whether the app's engine compiles an ONNX on the phone
     * (ONNX Runtime's QNN EP does; sherpa-onnx runs context binaries only: QnnRuntime derives it from npuFormat).
     */
    fun decide(
        manifest: BundleManifest,
        device: DeviceIdentity,
        host: NativeHost,
        libDir: String,
        npuFormat: FileFormat = FileFormat.QNN_CONTEXT_BINARY,
        appVersion: String = "",
        remembered: RememberedFailure? = null,
        platform: Platform? = null,
        compilesOnnx: Boolean = true,
    ): Decision {
        val identity = identify(device)
        if (!manifest.supported) {
            val reason = Reasons.formatUnsupported(
                format = MiniJson.write(manifest.format),
                version = MiniJson.write(manifest.formatVersion),
                expectedFormat = BundleManifest.FORMAT,
                maxVersion = "${BundleManifest.FORMAT_VERSION}",
            )
            return Decision(
                provider = Provider.CPU,
                soc = identity.soc,
                identifiedBy = identity.identifiedBy,
                reason = reason.text,
                reasonKey = reason.key,
            )
        }
        val soc = identity.soc
        // Target names are not trimmed: the schema allows none with whitespace, and the reason lists them as written.
        val target = soc?.let { found -> manifest.targets.firstOrNull { canonical(it.soc) == found } }
        if (target == null && manifest.onDevice != null) {
            return onDevice(manifest, manifest.onDevice, device, identity, host, libDir, appVersion, remembered, platform,
                compilesOnnx)
        }
        if (soc == null) {
            val reason = if (identity.identifiedBy == null) {
                Reasons.socUnreported()
            } else {
                Reasons.socNotInCatalog(platform = device.boardPlatform.orEmpty().trimAscii())
            }
            return cpu(manifest, identity, reason)
        }
        if (target == null) {
            return cpu(manifest, identity, Reasons.socNotInBundle(soc = soc, targets = listedTargets(manifest)))
        }
        // A graph that failed validation, shipped for the CPU on this SoC: decided before any library is touched.
        if (target.acceptedOn == "cpu") {
            val graph = manifest.graphs.firstOrNull { it.name in target.accepted }
            if (graph != null) {
                val reason = Reasons.validationFailed(
                    graph = graph.name,
                    soc = soc,
                    reason = target.accepted.getValue(graph.name),
                )
                return cpu(manifest, identity, reason)
            }
        }
        val paths = LinkedHashMap<String, String>()
        val cpuGraphs = manifest.graphs.filter { it.cpuOnly }.map { it.name }
        val cpuFiles = manifest.cpu.filter { it.graph in cpuGraphs }
        for (graph in manifest.graphs) {
            if (graph.cpuOnly) { // a split model's part that always runs on the CPU
                val model = cpuFiles.firstOrNull { it.graph == graph.name && it.format == FileFormat.ONNX }
                    ?: return cpu(manifest, identity, Reasons.graphFileMissing(soc = soc, format = FileFormat.ONNX.id, graph = graph.name))
                paths[graph.name] = model.path
                continue
            }
            val artifact = target.artifacts.firstOrNull { it.serves(graph.name) && it.format == npuFormat }
            if (artifact == null) {
                val reason = Reasons.graphFileMissing(soc = soc, format = npuFormat.id, graph = graph.name)
                return cpu(manifest, identity, reason)
            }
            paths[graph.name] = artifact.path
        }
        val arch = target.dspArch
        val loaded = load(manifest, identity, soc, arch, host, libDir, appVersion, remembered) { return it }
        // A context binary of a newer QAIRT does not load on an older runtime ("Could not create context from binary").
        val runtimeVersion = loaded.runtimeVersion
        val required = manifest.qairt.minRuntime
        if (runtimeVersion != null && required != null && runtimeTooOld(runtimeVersion, required)) {
            val reason = Reasons.runtimeTooOld(runtime = runtimeVersion, required = required)
            return cpu(manifest, identity, reason, adsp = loaded.adsp, runtimeVersion = runtimeVersion)
        }
        return npu(
            identity, loaded, Reasons.npu(soc = soc, arch = arch), arch, target.socId, paths,
            files = (target.artifacts + cpuFiles).map { it.path },
            cpuGraphs = cpuGraphs,
            source = NpuSource.PREBUILT,
        )
    }

    /**
     * A phone whose SoC has no bundle target, with a bundle that the app can compile on the device (manifest
     * on_device). The steps, in order (qnndeploy/decide/decision.py has the same): the HTP arch, the catalog's for
     * a catalog SoC, else the platform's (whose soc_model is then the SoC's), else none (the CPU); per graph that is
     * not cpuOnly, in the manifest's order, the arch validated and the ONNX listed; the bundled runtime's Stub and Skel
     * for the arch; a remembered failure;
     * ADSP_LIBRARY_PATH and the libraries, as for a target; the loaded runtime not older than the oldest QAIRT
     * measured to compile for the arch (Generated.ARCH_MIN_QAIRT; an unknown version refuses nothing).
     */
    private fun onDevice(
        manifest: BundleManifest,
        onDevice: OnDevice,
        device: DeviceIdentity,
        identity: SocIdentity,
        host: NativeHost,
        libDir: String,
        appVersion: String,
        remembered: RememberedFailure?,
        platform: Platform?,
        compilesOnnx: Boolean,
    ): Decision {
        val soc = identity.soc
        val catalogArch = soc?.let { SocCatalog.ARCHS[it] }
        val arch: String
        val socId: Long
        when {
            soc != null && catalogArch != null -> {
                arch = catalogArch
                socId = SocCatalog.IDS.getValue(soc)
            }
            platform != null -> {
                arch = platform.dspArch
                socId = platform.socModel.toLong()
            }
            soc != null -> return cpu(manifest, identity, Reasons.archUnknown(soc = soc))
            identity.identifiedBy == null -> return cpu(manifest, identity, Reasons.socUnreported())
            else -> {
                val reason = Reasons.socNotInCatalog(platform = device.boardPlatform.orEmpty().trimAscii())
                return cpu(manifest, identity, reason)
            }
        }
        // the SoC as the reasons name it: as identified, else by the soc_model the platform reported
        val name = soc ?: "soc_model $socId"
        if (!compilesOnnx) {
            return cpu(manifest, identity, Reasons.onDeviceNeedsOrt(soc = name, arch = arch, targets = listedTargets(manifest)))
        }
        val paths = LinkedHashMap<String, String>()
        val files = ArrayList<String>()
        val options = LinkedHashMap<String, Map<String, String>>()
        for (graph in manifest.graphs) {
            if (graph.cpuOnly) continue
            val entry = onDevice.graphs.firstOrNull { it.graph == graph.name }
            if (entry == null || arch !in entry.validated) {
                val reason = Reasons.notValidatedOnDevice(
                    soc = name,
                    arch = arch,
                    targets = listedTargets(manifest),
                    validated = entry?.validated.orEmpty().joinToString(", ").ifEmpty { "none" },
                )
                return cpu(manifest, identity, reason)
            }
            // the model and the files beside it (external data): the CPU's when it is the CPU model, else on_device's
            val pool = if (manifest.cpu.any { it.path == entry.path }) manifest.cpu else onDevice.artifacts
            if (pool.none { it.path == entry.path && it.format == FileFormat.ONNX }) {
                return cpu(manifest, identity, Reasons.graphFileMissing(soc = name, format = FileFormat.ONNX.id, graph = graph.name))
            }
            paths[graph.name] = entry.path
            files.addAll(pool.filter { it.serves(graph.name) }.map { it.path })
            options[graph.name] = entry.epOptions
        }
        // a split model's part that always runs on the CPU: its CPU files
        val cpuGraphs = manifest.graphs.filter { it.cpuOnly }.map { it.name }
        for (file in manifest.cpu.filter { f -> cpuGraphs.any { f.serves(it) } }) {
            files.add(file.path)
            if (file.format == FileFormat.ONNX) paths[file.graph] = file.path
        }
        val loaded = load(manifest, identity, name, arch, host, libDir, appVersion, remembered) { return it }
        val runtimeVersion = loaded.runtimeVersion
        val required = SocCatalog.ARCH_MIN_QAIRT[arch]
        if (runtimeVersion != null && required != null && runtimeTooOld(runtimeVersion, required)) {
            val reason = Reasons.runtimeTooOldForArch(runtime = runtimeVersion, required = required, arch = arch)
            return cpu(manifest, identity, reason, adsp = loaded.adsp, runtimeVersion = runtimeVersion)
        }
        return npu(
            identity, loaded, Reasons.npuOnDevice(soc = name, arch = arch), arch, socId, paths,
            files = files.distinct(), // a data file several graphs' models share is copied once
            cpuGraphs = cpuGraphs,
            source = NpuSource.ON_DEVICE,
            compileBudgetS = onDevice.budgetS,
            epOptions = options,
        )
    }

    /** The QNN libraries of an arch as loaded: their names, ADSP_LIBRARY_PATH as set, the runtime's QAIRT version. */
    private class Loaded(val libs: QnnLibraries, val adsp: String, val runtimeVersion: String?)

    /**
     * The steps both NPU paths share, in order: the bundled runtime has the arch's libraries; no remembered failure
     * of this app and bundle version; ADSP_LIBRARY_PATH set; libQnnSystem, libQnnHtp and the arch's Stub loaded
     * (every failure message kept); then the loaded runtime's version is asked. The CPU decision of the first step
     * that fails goes to [toCpu], which does not return.
     */
    private inline fun load(
        manifest: BundleManifest,
        identity: SocIdentity,
        soc: String,
        arch: String,
        host: NativeHost,
        libDir: String,
        appVersion: String,
        remembered: RememberedFailure?,
        toCpu: (Decision) -> Nothing,
    ): Loaded {
        val libs = qnnLibraries(arch)
        if (manifest.runtime.mode == RuntimeMode.BUNDLED) {
            val shipped = manifest.runtime.libs.map { it.path.substringAfterLast('/') }.toSet()
            val missing = listOf(libs.backend, libs.system, libs.stub, libs.skel).filter { it !in shipped }
            if (missing.isNotEmpty()) {
                val reason = Reasons.runtimeLibsMissing(libs = missing.joinToString(", "), soc = soc, arch = arch)
                toCpu(cpu(manifest, identity, reason))
            }
        }
        if (remembered != null && remembered.appVersion == appVersion &&
            remembered.bundleVersion == manifest.bundleVersion
        ) {
            toCpu(cpu(manifest, identity, Reasons.failedBefore(message = remembered.message)))
        }

        // The Skel runs on the DSP, which finds it through ADSP_LIBRARY_PATH: set it before any QNN library loads.
        val adsp = adspLibraryPath(libDir, host.getenv(ADSP_VAR))
        try {
            host.setenv(ADSP_VAR, adsp)
        } catch (e: Exception) {
            toCpu(cpu(manifest, identity, Reasons.adspNotSet(error = e.message ?: e.javaClass.name)))
        }
        val failed = ArrayList<String>()
        for (name in listOf(libs.system, libs.backend, libs.stub)) {
            try {
                host.loadLibrary(name)
            } catch (e: Throwable) {
                if (e is VirtualMachineError) throw e
                failed.add("$name: ${e.message ?: e.javaClass.name}")
            }
        }
        if (failed.isNotEmpty()) {
            toCpu(cpu(manifest, identity, Reasons.libsNotLoaded(failures = failed.joinToString("; ")), adsp = adsp))
        }
        val runtimeVersion = try {
            host.qnnRuntimeVersion()
        } catch (e: Exception) {
            null
        }
        return Loaded(libs, adsp, runtimeVersion)
    }

    /**
     * The NPU decision, made here for both paths (a bundle target's files, or the ONNX compiled on the phone): the
     * libraries as [loaded], the model per graph in [paths] and the bundle [files] to have in app storage. The
     * identified SoC stays the decision's soc: an on-device decision for a SoC only the platform named has none.
     */
    private fun npu(
        identity: SocIdentity,
        loaded: Loaded,
        reason: Reason,
        arch: String,
        socId: Long,
        paths: Map<String, String>,
        files: List<String>,
        cpuGraphs: List<String>,
        source: String,
        compileBudgetS: Double? = null,
        epOptions: Map<String, Map<String, String>> = emptyMap(),
    ): Decision = Decision(
        provider = Provider.NPU,
        soc = identity.soc,
        identifiedBy = identity.identifiedBy,
        reason = reason.text,
        reasonKey = reason.key,
        dspArch = arch,
        socId = socId,
        paths = paths,
        files = files,
        cpuGraphs = cpuGraphs,
        backendLib = loaded.libs.backend,
        systemLib = loaded.libs.system,
        adspLibraryPath = loaded.adsp,
        runtimeVersion = loaded.runtimeVersion,
        npuSource = source,
        compileBudgetS = compileBudgetS,
        epOptions = epOptions,
    )

    private fun listedTargets(manifest: BundleManifest): String = manifest.targets.joinToString(", ") { it.soc }.ifEmpty { "none" }

    /** The CPU fallback of a bundle: its ONNX model per graph, and every CPU file (external data too) beside them. */
    fun cpu(
        manifest: BundleManifest,
        identity: SocIdentity,
        reason: Reason,
        adsp: String? = null,
        runtimeVersion: String? = null,
    ): Decision = Decision(
        provider = Provider.CPU,
        soc = identity.soc,
        identifiedBy = identity.identifiedBy,
        reason = reason.text,
        reasonKey = reason.key,
        paths = manifest.cpu.filter { it.format == FileFormat.ONNX }.associate { it.graph to it.path },
        files = manifest.cpu.map { it.path },
        adspLibraryPath = adsp,
        runtimeVersion = runtimeVersion,
    )

    /** The SoC model first, else the ro.board.platform codename through the catalog. */
    fun identify(device: DeviceIdentity): SocIdentity {
        val raw = device.socModel.orEmpty().trimAscii()
        if (raw.isNotEmpty() && raw.lowercaseAscii() != "unknown") { // Build.SOC_MODEL is "unknown" when unset
            val via = if (device.sdkInt >= SOC_MODEL_SINCE_SDK) "Build.SOC_MODEL" else "ro.soc.model"
            return SocIdentity(soc = canonical(raw), identifiedBy = via)
        }
        val platform = device.boardPlatform.orEmpty().trimAscii().lowercaseAscii()
        if (platform.isEmpty()) return SocIdentity()
        return SocIdentity(soc = SocCatalog.CODENAMES[platform], identifiedBy = "ro.board.platform")
    }

    /** The Skel folder first, then the existing entries, then the vendor DSP folders; ';'-separated, no repeats. */
    fun adspLibraryPath(skelDir: String, current: String?): String {
        val out = ArrayList<String>()
        for (entry in listOf(skelDir) + current.orEmpty().split(";") + SocCatalog.VENDOR_DSP_FOLDERS) {
            if (entry.trimAscii().isNotEmpty() && entry !in out) out.add(entry)
        }
        return out.joinToString(";")
    }

    /** The library names for an HTP arch: v79 -> libQnnHtpV79Stub.so (one leading "v" dropped, as the twin does). */
    fun qnnLibraries(dspArch: String): QnnLibraries {
        val n = dspArch.removePrefix("v")
        return QnnLibraries(stub = "libQnnHtpV${n}Stub.so", skel = "libQnnHtpV${n}Skel.so")
    }

    /** (X, Y, Z) of a well-formed "X.Y.Z", compared as numbers (2.9.0 < 2.49.0); null for anything else. */
    fun versionKey(text: String): List<Int>? =
        if (VERSION.matches(text)) text.split('.').map { it.toInt() } else null

    /**
     * Whether the runtime is older than required; an unknown or malformed version on either side refuses nothing
     * (a failing NPU init still falls back to the CPU, and is remembered).
     */
    fun runtimeTooOld(runtime: String, required: String): Boolean {
        val have = versionKey(runtime) ?: return false
        val need = versionKey(required) ?: return false
        val differ = have.indices.firstOrNull { have[it] != need[it] } ?: return false
        return have[differ] < need[differ]
    }

    private fun canonical(soc: String): String = soc.uppercaseAscii().let { SocCatalog.MODELS[it] ?: it }

    private fun String.trimAscii(): String = trim { it in SPACE }

    private fun String.uppercaseAscii(): String =
        map { if (it in 'a'..'z') it.uppercaseChar() else it }.joinToString("")

    private fun String.lowercaseAscii(): String =
        map { if (it in 'A'..'Z') it.lowercaseChar() else it }.joinToString("")
}
