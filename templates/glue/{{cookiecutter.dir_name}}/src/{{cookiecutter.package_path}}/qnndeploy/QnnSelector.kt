package {{ cookiecutter.package }}.qnndeploy

// NPU or CPU for this phone: the on-device decision of qnndeploy, in plain Kotlin (no Android imports), so it runs
// and is tested on any JVM. Its twin is qnndeploy/decision.py; the two must agree, reason strings included.

/** What the phone says about its chip. socModel: Build.SOC_MODEL on Android 12+, else the ro.soc.model property. */
data class DeviceIdentity(val socModel: String?, val boardPlatform: String?, val sdkInt: Int)

/** A failed NPU init; it sends the app to the CPU while the app and the bundle stay the same versions. */
data class RememberedFailure(val appVersion: String, val bundleVersion: String, val message: String)

/** What the selector needs from the process; on a phone: android.system.Os and System.loadLibrary. */
interface NativeHost {
    fun getenv(name: String): String?

    fun setenv(name: String, value: String)

    /** Loads a library by file name (libQnnHtp.so); throws, with the loader's message, when it cannot. */
    fun loadLibrary(fileName: String)
}

data class Decision(
    val provider: String,
    val soc: String?,
    val identifiedBy: String?,
    val reason: String,
    val dspArch: String? = null,
    /** graph -> bundle path of the model to load: a context binary or EPContext .onnx on the NPU, an .onnx on the CPU */
    val paths: Map<String, String> = emptyMap(),
    /** every bundle file this decision needs in app storage (on the CPU: the models and their external data files) */
    val files: List<String> = emptyList(),
    val backendLib: String? = null,
    val systemLib: String? = null,
    /** the ADSP_LIBRARY_PATH value set before the QNN libraries were loaded, if it was set */
    val adspLibraryPath: String? = null,
) {
    val npu: Boolean get() = provider == "npu"

    /** The same keys as qnndeploy's Python Decision, so a log line can be compared with `qnndeploy device verify`. */
    fun toJson(): String = MiniJson.write(
        linkedMapOf(
            "provider" to provider, "soc" to soc, "identified_by" to identifiedBy, "reason" to reason,
            "dsp_arch" to dspArch, "paths" to paths, "files" to files, "backend_lib" to backendLib,
            "system_lib" to systemLib, "adsp_library_path" to adspLibraryPath,
        ),
    )
}

object QnnSelector {
    const val FORMAT = "qnndeploy-bundle"
    /** The manifest version qnndeploy writes; every version from 1 up to it is read. */
    const val FORMAT_VERSION = 2L
    const val CONTEXT_BINARY = "qnn-context-binary"
    const val EPCONTEXT = "ort-epcontext"
    const val ONNX = "onnx"
    const val ADSP_VAR = "ADSP_LIBRARY_PATH"
    private const val SOC_MODEL_SINCE_SDK = 31

    /**
     * NPU only when the SoC matches a bundle target AND the QNN libraries load; otherwise CPU. Always with a reason.
     * The steps, in order: SoC identity; a target for it; ADSP_LIBRARY_PATH; load libQnnSystem, libQnnHtp and the
     * target's Stub (every failure message kept). A remembered failed NPU init skips the last two steps.
     */
    fun decide(
        manifest: Any?,
        device: DeviceIdentity,
        host: NativeHost,
        libDir: String,
        npuFormat: String = CONTEXT_BINARY,
        appVersion: String = "",
        remembered: RememberedFailure? = null,
    ): Decision {
        val (soc, via) = identify(device)
        val m = manifest as? Map<*, *> ?: emptyMap<String, Any?>()
        val format = m["format"]
        val version = m["format_version"]
        if (format != FORMAT || version !is Long || version !in 1L..FORMAT_VERSION) {
            return Decision(
                "cpu", soc, via,
                "bundle manifest format ${MiniJson.write(format)} version ${MiniJson.write(version)} is not " +
                    "supported (this app reads \"$FORMAT\" versions 1 to $FORMAT_VERSION): scaffold again",
            )
        }
        if (soc == null) {
            val reason = if (via == null) {
                "SoC unknown: the device reports no Build.SOC_MODEL / ro.soc.model and no ro.board.platform"
            } else {
                "SoC unknown: ro.board.platform \"${device.boardPlatform?.trim()}\" is not in the SoC catalog"
            }
            return cpu(m, null, via, reason)
        }

        val targets = objects(m["targets"])
        val target = targets.firstOrNull { canonical(text(it["soc"])) == soc }
        if (target == null) {
            val listed = targets.joinToString(", ") { text(it["soc"]) }.ifEmpty { "none" }
            return cpu(m, soc, via, "SoC $soc is not in the bundle (targets: $listed)")
        }
        val artifacts = objects(target["artifacts"])
        val paths = LinkedHashMap<String, String>()
        for (graph in objects(m["graphs"])) {
            val name = text(graph["name"])
            val artifact = artifacts.firstOrNull { it["graph"] == name && it["format"] == npuFormat }
                ?: return cpu(m, soc, via, "target $soc has no $npuFormat file for graph \"$name\"")
            paths[name] = text(artifact["path"])
        }
        val arch = text(target["dsp_arch"])
        val (backend, system, stub, skel) = qnnLibraries(arch)
        val runtime = m["runtime"] as? Map<*, *> ?: emptyMap<String, Any?>()
        if (runtime["mode"] == "bundled") {
            val shipped = objects(runtime["libs"]).map { text(it["path"]).substringAfterLast('/') }.toSet()
            val missing = listOf(backend, system, stub, skel).filter { it !in shipped }
            if (missing.isNotEmpty()) {
                return cpu(m, soc, via, "the bundle has no ${missing.joinToString(", ")} for $soc ($arch)")
            }
        }
        if (remembered != null && remembered.appVersion == appVersion &&
            remembered.bundleVersion == bundleVersion(m)
        ) {
            return cpu(
                m, soc, via,
                "NPU init failed before with this app and bundle version (${remembered.message}); " +
                    "using the CPU until either changes",
            )
        }

        // The Skel runs on the DSP, which finds it through ADSP_LIBRARY_PATH: set it before any QNN library loads.
        val adsp = adspLibraryPath(libDir, host.getenv(ADSP_VAR))
        try {
            host.setenv(ADSP_VAR, adsp)
        } catch (e: Exception) {
            return cpu(m, soc, via, "cannot set $ADSP_VAR: ${e.message ?: e.javaClass.name}")
        }
        val failed = ArrayList<String>()
        for (name in listOf(system, backend, stub)) {
            try {
                host.loadLibrary(name)
            } catch (e: Throwable) {
                if (e is VirtualMachineError) throw e
                failed.add("$name: ${e.message ?: e.javaClass.name}")
            }
        }
        if (failed.isNotEmpty()) {
            return cpu(m, soc, via, "QNN libraries did not load: ${failed.joinToString("; ")}", adsp)
        }
        return Decision(
            "npu", soc, via, "SoC $soc ($arch) is in the bundle and the QNN libraries loaded", arch, paths,
            artifacts.map { text(it["path"]) }, backend, system, adsp,
        )
    }

    /** The CPU fallback of a bundle: its ONNX model per graph, and every CPU file (external data too) beside them. */
    fun cpu(manifest: Map<*, *>, soc: String?, via: String?, reason: String, adsp: String? = null): Decision {
        val cpu = objects(manifest["cpu"])
        return Decision(
            "cpu", soc, via, reason,
            paths = cpu.filter { it["format"] == ONNX }.associate { text(it["graph"]) to text(it["path"]) },
            files = cpu.map { text(it["path"]) },
            adspLibraryPath = adsp,
        )
    }

    /** (SoC, how it was found): the SoC model first, else the ro.board.platform codename through the catalog. */
    fun identify(device: DeviceIdentity): Pair<String?, String?> {
        val raw = device.socModel?.trim().orEmpty()
        if (raw.isNotEmpty() && !raw.equals("unknown", ignoreCase = true)) {
            val via = if (device.sdkInt >= SOC_MODEL_SINCE_SDK) "Build.SOC_MODEL" else "ro.soc.model"
            return Pair(canonical(raw), via)
        }
        val platform = device.boardPlatform?.trim()?.lowercase().orEmpty()
        if (platform.isNotEmpty()) return Pair(SocCatalog.CODENAMES[platform], "ro.board.platform")
        return Pair(null, null)
    }

    /** The Skel folder first, then the existing entries, then the vendor DSP folders; ';'-separated, no repeats. */
    fun adspLibraryPath(skelDir: String, current: String?): String {
        val out = ArrayList<String>()
        for (entry in listOf(skelDir) + (current ?: "").split(";") + SocCatalog.VENDOR_DSP_FOLDERS) {
            if (entry.isNotBlank() && entry !in out) out.add(entry)
        }
        return out.joinToString(";")
    }

    /** Backend, system, Stub and Skel file names: QNN loads the Stub and the Skel by exactly these names. */
    fun qnnLibraries(dspArch: String): List<String> {
        val n = dspArch.removePrefix("v")
        return listOf("libQnnHtp.so", "libQnnSystem.so", "libQnnHtpV${n}Stub.so", "libQnnHtpV${n}Skel.so")
    }

    fun bundleVersion(manifest: Map<*, *>): String = "${manifest["name"]} ${manifest["version"]}"

    private fun canonical(soc: String): String = soc.trim().uppercase().let { SocCatalog.MODELS[it] ?: it }

    private fun objects(value: Any?): List<Map<*, *>> = (value as? List<*>).orEmpty().filterIsInstance<Map<*, *>>()

    private fun text(value: Any?): String = value as? String ?: ""
}
