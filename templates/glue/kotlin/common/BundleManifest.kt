package com.example.qnnsample.qnndeploy

// The bundle manifest (assets/qnndeploy/manifest.json), the parts the app reads, parsed once into plain data
// classes. The field names follow manifest.json (qnndeploy/schemas/manifest.schema.json) one for one, in camel case.

/** Where the QNN runtime libraries come from: the bundle itself (jniLibs), or a Maven artifact (none in the bundle). */
enum class RuntimeMode { BUNDLED, EXTERNAL }

/** A file of the bundle: a model, a context binary, an external data file or a runtime library. */
data class BundleFile(
    val path: String,
    val sha256: String,
    /** the graph it belongs to; empty for a runtime library and for a shared context binary */
    val graph: String = "",
    /** null for a runtime library */
    val format: FileFormat? = null,
    /** a context binary shared by several graphs (format 3): their names */
    val graphs: List<String> = emptyList(),
) {
    /** Whether this file is (or holds) the graph's. */
    internal fun serves(graph: String): Boolean = this.graph == graph || graph in graphs
}

/** An input or output of a graph; null in shape is a symbolic dimension. */
data class Tensor(val name: String, val dtype: String, val shape: List<Long?> = emptyList())

/** cpuOnly: a split model's part that always runs on the CPU (`prepare --split-at`, `bundle --split`). */
data class Graph(
    val name: String,
    val inputs: List<Tensor> = emptyList(),
    val outputs: List<Tensor> = emptyList(),
    val cpuOnly: Boolean = false,
)

/**
 * The files for one SoC: its context binaries and their EPContext wrappers. socId: QNN's soc_model number of the SoC
 * (manifest "soc_id"). accepted: graph -> the reason its failed validation was shipped with
 * (validation.graphs.GRAPH.accepted.reason, `bundle --accept`); acceptedOn: where the app runs such a target ("cpu":
 * the CPU fallback; null or "npu": the NPU).
 */
data class Target(
    val soc: String,
    val socId: Long,
    val dspArch: String,
    val artifacts: List<BundleFile> = emptyList(),
    val accepted: Map<String, String> = emptyMap(),
    val acceptedOn: String? = null,
)

/**
 * The QAIRT of the bundle, the part the app reads. minRuntime: the oldest QNN runtime ("X.Y.Z") that loads the
 * bundle's context binaries; null when the manifest has none (older bundles) or it is not a string.
 */
data class Qairt(val minRuntime: String? = null)

data class Runtime(val mode: RuntimeMode = RuntimeMode.EXTERNAL, val libs: List<BundleFile> = emptyList())

/**
 * What the app compiles for one graph on a phone whose SoC has no target (format 4, `bundle build
 * --on-device-compile`): path, the ONNX it compiles (a CPU model's path when it is the same file, else one of
 * OnDevice.artifacts); epOptions, the QNN EP options it must use besides backend_path, htp_arch and soc_model (which
 * come from the phone's SoC); validated, the HTP arches ("v81") whose host compile with these options passed
 * validation.
 */
data class OnDeviceGraph(
    val graph: String,
    val path: String,
    val epOptions: Map<String, String> = emptyMap(),
    val validated: List<String> = emptyList(),
)

/**
 * The manifest's on_device: budgetS, the first run's compile time budget in seconds (past it the app takes the CPU
 * and remembers it); one entry per graph that is not cpuOnly; artifacts, the models to compile that differ from the
 * CPU ones, and their external data files.
 */
data class OnDevice(
    val budgetS: Double = DEFAULT_BUDGET_S,
    val graphs: List<OnDeviceGraph> = emptyList(),
    val artifacts: List<BundleFile> = emptyList(),
) {
    internal companion object {
        /** qnndeploy's default (formats/manifest.py DEFAULT_COMPILE_BUDGET_S), for a manifest without budget_s */
        const val DEFAULT_BUDGET_S = Generated.ON_DEVICE_BUDGET_S
    }
}

/** An encoder-decoder's decode loop (format 5), as qnndeploy validated it: the tokenizer file of its tokens' text. */
data class BundleLoop(
    val tokenizer: BundleFile? = null,
)

data class BundleManifest(
    /** format and formatVersion as written in the file (any JSON value), so that an unknown one can be named */
    val format: Any? = FORMAT,
    val formatVersion: Any? = FORMAT_VERSION,
    val name: String = "",
    val version: String = "",
    val graphs: List<Graph> = emptyList(),
    val targets: List<Target> = emptyList(),
    /** the CPU fallback: one ONNX model per graph, and the external data files they name */
    val cpu: List<BundleFile> = emptyList(),
    val runtime: Runtime = Runtime(),
    val qairt: Qairt = Qairt(),
    /** the HTP performance mode the bundle asks for (`bundle --performance-mode`); null: the glue's default */
    val htpPerformanceMode: String? = null,
    /** the order the app runs the graphs in (a split model's parts); the graphs' order when the bundle gives none */
    val pipelineOrder: List<String> = emptyList(),
    /** what the app compiles on a phone whose SoC has no target; null: such a phone takes the CPU */
    val onDevice: OnDevice? = null,
    /** the decode loop the app runs over an encoder and a decoder (format 5); null when the bundle has none */
    val loop: BundleLoop? = null,
    /** a decoder LLM's prompt and decode graphs and its KV cache (format 7); null when the bundle has none */
    val generation: GenerationConfig? = null,
) {
    val pipeline: List<String> get() = pipelineOrder.ifEmpty { graphs.map { it.name } }

    /** Whether this app reads the manifest's format; when it does not, only format and formatVersion are set. */
    internal val supported: Boolean get() = format == FORMAT && formatVersion is Long && formatVersion in 1L..FORMAT_VERSION

    /** Changes with every bundle release: a remembered NPU failure counts only for the same one. */
    internal val bundleVersion: String get() = "$name $version"

    /** Every bundle file the app may copy to its storage: the CPU files, every target's, the on-device models and the
     *  tokenizer of the loop or the generation. */
    internal val modelFiles: List<BundleFile> get() =
        cpu + targets.flatMap { it.artifacts } + onDevice?.artifacts.orEmpty() + listOfNotNull(loop?.tokenizer) +
            listOfNotNull(generation?.tokenizer)

    internal companion object {
        const val FORMAT = Generated.FORMAT

        /** The manifest version qnndeploy writes; every version from 1 up to it is read. */
        const val FORMAT_VERSION = Generated.FORMAT_VERSION

        fun parse(text: String): BundleManifest = from(MiniJson.parse(text))

        /**
         * From the value MiniJson parsed. The format and its version are read first, the rest only when this app
         * reads that format. Throws IllegalArgumentException for a manifest that does not follow the schema, which
         * qnndeploy checked at scaffold time: the app holds a damaged bundle.
         */
        fun from(json: Any?): BundleManifest {
            val m = json as? Map<*, *> ?: throw IllegalArgumentException("the bundle manifest is not a JSON object")
            val header = BundleManifest(format = m["format"], formatVersion = m["format_version"])
            if (!header.supported) return header
            val runtime = m["runtime"] as? Map<*, *> ?: emptyMap<String, Any?>()
            return header.copy(
                name = m.text("name"),
                version = m.text("version"),
                graphs = m.objects("graphs").map {
                    Graph(
                        it.text("name"), it.objects("inputs").map(::tensor), it.objects("outputs").map(::tensor),
                        cpuOnly = it["cpu_only"] == true,
                    )
                },
                targets = m.objects("targets").map {
                    Target(
                        it.text("soc"), it["soc_id"] as? Long ?: bad("soc_id", it), it.text("dsp_arch"),
                        it.objects("artifacts").map(::file),
                        accepted = accepted(it["validation"]), acceptedOn = it["accepted_on"] as? String,
                    )
                },
                cpu = m.objects("cpu").map(::file),
                runtime = Runtime(
                    mode = when (runtime["mode"]) {
                        "bundled" -> RuntimeMode.BUNDLED
                        "external", null -> RuntimeMode.EXTERNAL
                        else -> bad("mode", runtime)
                    },
                    libs = runtime.objects("libs").map(::file),
                ),
                qairt = Qairt(minRuntime = (m["qairt"] as? Map<*, *>)?.get("min_runtime") as? String),
                htpPerformanceMode = (m["htp"] as? Map<*, *>)?.get("performance_mode") as? String,
                pipelineOrder = m.list("pipeline").map { it as? String ?: bad("pipeline", m) },
                onDevice = (m["on_device"] as? Map<*, *>)?.let(::onDevice),
                loop = (m["loop"] as? Map<*, *>)?.let { BundleLoop((it["tokenizer"] as? Map<*, *>)?.let(::file)) },
                generation = (m["generation"] as? Map<*, *>)?.let(::generation),
            )
        }

        /** generation (format 7): every field as the manifest has it; a missing one takes GenerationConfig's default. */
        internal fun generation(m: Map<*, *>): GenerationConfig {
            val inputs = m["inputs"] as? Map<*, *> ?: emptyMap<String, Any?>()
            fun names(layer: Map<*, *>, key: String): KvNames {
                val pair = layer.list(key).map { it as? String ?: bad(key, layer) }
                if (pair.size != 2) bad(key, layer)
                return KvNames(past = pair[0], present = pair[1])
            }
            val defaults = GenerationConfig(vocab = 0)
            return GenerationConfig(
                kind = m["kind"] as? String ?: defaults.kind,
                promptTokens = m.count("prompt_tokens"),
                contextTokens = m.count("context_tokens"),
                vocab = m.count("vocab"),
                precision = m["precision"] as? String ?: defaults.precision,
                inputs = GenerationInputs(
                    inputIds = inputs["input_ids"] as? String ?: defaults.inputs.inputIds,
                    attentionMask = inputs["attention_mask"] as? String ?: defaults.inputs.attentionMask,
                    positionIds = inputs["position_ids"] as? String ?: defaults.inputs.positionIds,
                ),
                logits = m["logits"] as? String ?: defaults.logits,
                kv = m.objects("kv").map {
                    KvLayer(
                        layer = it.count("layer"), part = it.count("part"), key = names(it, "key"),
                        value = names(it, "value"), heads = it.count("heads"), headDim = it.count("head_dim"),
                        dtype = it["dtype"] as? String ?: "float32", npuDtype = it["npu_dtype"] as? String,
                    )
                },
                parts = m.objects("parts").map {
                    GenerationPart(
                        index = it.count("index"), prompt = it.text("prompt"), decode = it.text("decode"),
                        layers = it.list("layers").map { n -> (n as? Long)?.toInt() ?: bad("layers", it) },
                    )
                },
                tokenizer = (m["tokenizer"] as? Map<*, *>)?.let(::file),
            )
        }

        /** on_device; a budget_s that is absent is the default, ep_options that are not an object are none. */
        private fun onDevice(m: Map<*, *>): OnDevice {
            val budget = if (m.containsKey("budget_s")) m["budget_s"] as? Number ?: bad("budget_s", m) else null
            return OnDevice(
                budgetS = budget?.toDouble() ?: OnDevice.DEFAULT_BUDGET_S,
                graphs = m.objects("graphs").map { g ->
                    val options = g["ep_options"] as? Map<*, *> ?: emptyMap<String, String>()
                    OnDeviceGraph(
                        graph = g.text("graph"),
                        path = g.text("path"),
                        epOptions = options.entries.associate { (k, v) -> "$k" to (v as? String ?: bad("ep_options", g)) },
                        validated = g.list("validated").map { it as? String ?: bad("validated", g) },
                    )
                },
                artifacts = m.objects("artifacts").map(::file),
            )
        }

        private fun file(m: Map<*, *>): BundleFile {
            val format = m["format"]?.let { id -> FileFormat.entries.firstOrNull { it.id == id } ?: bad("format", m) }
            val graphs = m.list("graphs").map { it as? String ?: bad("graphs", m) }
            return BundleFile(m.text("path"), m.text("sha256"), m["graph"] as? String ?: "", format, graphs)
        }

        /** graph -> accepted reason, for each graph whose validation summary holds one (anything else: none). */
        private fun accepted(validation: Any?): Map<String, String> {
            val graphs = (validation as? Map<*, *>)?.get("graphs") as? Map<*, *> ?: return emptyMap()
            val out = LinkedHashMap<String, String>()
            for ((graph, summary) in graphs) {
                val reason = ((summary as? Map<*, *>)?.get("accepted") as? Map<*, *>)?.get("reason") as? String
                if (graph is String && reason != null) out[graph] = reason
            }
            return out
        }

        private fun tensor(m: Map<*, *>): Tensor =
            Tensor(m.text("name"), m.text("dtype"), m.list("shape").map { it as? Long })

        private fun Map<*, *>.text(key: String): String = this[key] as? String ?: bad(key, this)

        /** A count or index: a JSON integer from 0 to Int.MAX_VALUE. */
        private fun Map<*, *>.count(key: String): Int =
            (this[key] as? Long)?.takeIf { it in 0L..Int.MAX_VALUE.toLong() }?.toInt() ?: bad(key, this)

        /** The list under key; empty when the key is absent. */
        private fun Map<*, *>.list(key: String): List<*> = when (val value = this[key]) {
            null -> emptyList<Any?>()
            is List<*> -> value
            else -> bad(key, this)
        }

        private fun Map<*, *>.objects(key: String): List<Map<*, *>> =
            list(key).map { it as? Map<*, *> ?: bad(key, this) }

        private fun bad(key: String, where: Map<*, *>): Nothing = throw IllegalArgumentException(
            "the bundle manifest has no valid \"$key\" in ${MiniJson.write(where).take(200)}",
        )
    }
}
