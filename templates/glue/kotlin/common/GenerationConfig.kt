package com.example.qnnsample.qnndeploy

// A decoder LLM's generation as the bundle describes it (manifest "generation", format 7 and 8, `prepare --generate`):
// plain data classes that mirror the manifest's object one field for one field, in camel case. The session that runs
// it is GenerationSession (the ONNX Runtime engine's Generation.kt); the bundle's own is Generated.GENERATION.

/** The names of the loop's inputs, which the first part reads. */
data class GenerationInputs(
    val inputIds: String = "input_ids",
    val attentionMask: String = "attention_mask",
    val positionIds: String = "position_ids",
)

/** One half of a layer's cache: the graph input that reads the past entries, the output that gives the new ones. */
data class KvNames(val past: String, val present: String)

/**
 * One layer's KV cache: the part whose graphs read and write it, its key and value names, and its shape per entry
 * ([1, heads, entries, headDim]) and element type: dtype in the CPU models, npuDtype in the NPU graphs (format 8;
 * null: the same; "uint8" after compile --kv-bits 8).
 */
data class KvLayer(
    val layer: Int,
    val part: Int,
    val key: KvNames,
    val value: KvNames,
    val heads: Int,
    val headDim: Int,
    val dtype: String = "float32",
    val npuDtype: String? = null,
)

/** One part of the model: its prompt graph (promptTokens at a time) and decode graph (one), and its layers. */
data class GenerationPart(
    val index: Int,
    val prompt: String,
    val decode: String,
    val layers: List<Int> = emptyList(),
)

/**
 * The generation: prompt graphs of promptTokens (N) tokens and decode graphs of one, at contextTokens (CL), over
 * vocab tokens; the parts run in index order, each reading what earlier ones output by name; the last outputs
 * logits. tokenizer: the bundle's tokenizer file, null when it ships none.
 */
data class GenerationConfig(
    val kind: String = "decoder",
    val promptTokens: Int = 128,
    val contextTokens: Int = 1024,
    val vocab: Int,
    val precision: String = "",
    val inputs: GenerationInputs = GenerationInputs(),
    val logits: String = "logits",
    val kv: List<KvLayer> = emptyList(),
    val parts: List<GenerationPart> = emptyList(),
    val tokenizer: BundleFile? = null,
) {
    /** The parts in the order they run. */
    val orderedParts: List<GenerationPart> get() = parts.sortedBy { it.index }

    /** Every graph the generation runs: each part's prompt and decode graph. */
    val graphs: List<String> get() = orderedParts.flatMap { listOf(it.prompt, it.decode) }

    /**
     * The longest prompt that fits: each chunk of N must start with at most CL - N entries in the cache (a last
     * single token goes through the decode graph), and the cache (CL - 1 entries) must hold the whole prompt.
     */
    val maxPromptTokens: Int get() {
        val n = promptTokens
        if (contextTokens <= n) return 0
        val lastChunkStart = (contextTokens - n) / n * n
        return minOf(contextTokens - 1, lastChunkStart + n + 1)
    }
}
