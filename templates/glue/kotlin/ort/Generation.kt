package com.example.qnnsample.qnndeploy

import ai.onnxruntime.OnnxJavaType
import ai.onnxruntime.OnnxTensor
import ai.onnxruntime.OnnxTensorLike
import ai.onnxruntime.OnnxValue
import ai.onnxruntime.OrtEnvironment
import ai.onnxruntime.OrtSession
import android.content.Context
import android.util.Log
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.nio.IntBuffer

/** Why a generation ended. */
enum class StopReason {
    /** maxTokens tokens were generated */
    MAX_TOKENS,

    /** the model gave one of the stop tokens (not in the result's tokens) */
    STOP_TOKEN,

    /** the cache is full: the context length holds no further token */
    CONTEXT_FULL,
}

/**
 * What generate gives: the generated tokens (without the stop token), why it stopped, and the time spent on the
 * prompt (its chunks, up to the first token) and on the decode steps after it.
 */
data class GenerationResult(
    val tokens: List<Int>,
    val stop: StopReason,
    val promptTokens: Int,
    val promptMs: Double,
    val decodeMs: Double,
)

/**
 * Greedy generation with a decoder LLM split into parts of a prompt and a decode graph each (GenerationConfig, the
 * bundle's "generation"), on the NPU or the CPU as the glue's decision chose for this phone: its graphs are the
 * bundle's, opened by OrtModels (the EPContext wrappers on the NPU, the parts' ONNX on the CPU; the decision and its
 * reason are `decision`, logged as for any bundle).
 *
 * The cache is one buffer per layer for its key and one for its value, [1, heads, CL - 1, headDim], right-aligned:
 * the newest entry last, empty slots first (zero bytes, masked out). Its elements are float32, or uint8 where the
 * bundle's NPU graphs keep that layer's cache in 8 bits (KvLayer.npuDtype, compile --kv-bits 8) and they run: the
 * graphs' new entries are appended byte for byte, as their past input and present output share one encoding. A
 * prompt runs in chunks of N tokens (the last one right-padded with token 0), of which only the real tokens' new
 * entries are kept, a last single token through the decode graph; then one decode step per token while the cache
 * has room. This is the loop `qnndeploy validate` runs on the host (qnndeploy/model/generation.py, Stepper), so the
 * app runs what was checked.
 * One generation at a time; the session owns its models and closes them.
 */
class GenerationSession(val models: OrtModels, val config: GenerationConfig) : AutoCloseable {
    val decision: Decision get() = models.decision

    private val n = config.promptTokens
    private val cl = config.contextTokens
    private val parts = config.orderedParts
    private val layers: Map<KvLayer, Cache>

    /** Entries in the cache: the tokens run so far, which is also the next token's position. */
    private var filled = 0

    init {
        require(config.kind == "decoder") { "generation kind '${config.kind}': this glue runs decoders only" }
        require(n >= 1 && cl > n) { "generation of $n prompt tokens at context $cl: the context must be longer" }
        require(parts.isNotEmpty()) { "the generation has no parts" }
        for (graph in config.graphs) models.session(graph) // every part's graphs are open
        val binaries = decision.npu && decision.npuSource != NpuSource.ON_DEVICE // on-device: the CPU models compiled
        layers = config.kv.associateWith { layer ->
            val dtype = if (binaries) layer.npuDtype ?: layer.dtype else layer.dtype
            val type = ELEMENTS[dtype]
                ?: throw IllegalArgumentException("layer ${layer.layer}'s cache is $dtype: this glue keeps float32 or uint8 caches")
            require(parts.any { it.index == layer.part }) { "layer ${layer.layer}'s part ${layer.part} is not a part of the generation" }
            Cache(layer.heads, cl - 1, layer.headDim, type)
        }
    }

    /**
     * Runs the prompt and greedily generates up to maxTokens tokens, stopping early at one of stopTokens or when the
     * cache is full; onToken gets each token as it comes (on the calling thread). The cache starts empty: each call
     * is a generation of its own. Call it off the main thread. The prompt must hold 1 to config.maxPromptTokens
     * tokens, each in 0 until vocab.
     */
    @Synchronized
    fun generate(
        prompt: List<Int>,
        maxTokens: Int,
        stopTokens: Set<Int> = emptySet(),
        onToken: ((Int) -> Unit)? = null,
    ): GenerationResult {
        require(prompt.isNotEmpty()) { "the prompt is empty" }
        require(prompt.size <= config.maxPromptTokens) {
            "a prompt of ${prompt.size} tokens does not fit: at most ${config.maxPromptTokens} at context $cl in chunks of $n"
        }
        require(prompt.all { it in 0 until config.vocab }) { "a prompt token is outside the vocabulary (0 until ${config.vocab})" }
        require(maxTokens >= 1) { "maxTokens must be at least 1" }
        layers.values.forEach { it.clear() }
        filled = 0

        val start = System.nanoTime()
        var next = 0
        var rest = prompt
        while (rest.isNotEmpty()) { // chunks of N; a last single token goes through the decode graph, as validate runs it
            val chunk = if (rest.size == 1) rest else rest.take(n)
            next = step(chunk, prompt = chunk.size > 1)
            rest = rest.drop(chunk.size)
        }
        val promptMs = (System.nanoTime() - start) / 1e6

        val tokens = ArrayList<Int>()
        val decodeStart = System.nanoTime()
        val stop: StopReason
        while (true) {
            if (next in stopTokens) {
                stop = StopReason.STOP_TOKEN
                break
            }
            tokens.add(next)
            onToken?.invoke(next)
            if (tokens.size >= maxTokens) {
                stop = StopReason.MAX_TOKENS
                break
            }
            if (filled >= cl - 1) { // the cache holds CL - 1 entries: no room for this token's
                stop = StopReason.CONTEXT_FULL
                break
            }
            next = step(listOf(next), prompt = false)
        }
        val decodeMs = (System.nanoTime() - decodeStart) / 1e6
        return GenerationResult(tokens, stop, prompt.size, promptMs, decodeMs)
    }

    /**
     * One run of every part: a prompt chunk of up to N real tokens (padded to N), or one decode token. Returns the
     * next token, the argmax of the logits row of the last real token, and keeps the real tokens' new cache entries.
     */
    private fun step(tokens: List<Int>, prompt: Boolean): Int {
        val width = if (prompt) n else 1
        val past = cl - width // the cache entries the graphs read
        check(filled <= past) { "$filled cache entries, more than the $past a ${if (prompt) "prompt" else "decode"} graph reads" }
        val env = OrtEnvironment.getEnvironment()
        val ids = IntArray(width) { tokens.getOrElse(it) { PAD } }
        val positions = IntArray(width) { filled + it }
        val mask = IntArray(cl) { if (it >= past - filled) 1 else 0 } // [0]*(past-filled) + [1]*filled + [1]*width
        val created = ArrayList<OnnxTensor>()
        val results = ArrayList<OrtSession.Result>()
        try {
            fun tensor(data: IntArray, vararg shape: Long) =
                OnnxTensor.createTensor(env, IntBuffer.wrap(data), shape).also { created.add(it) }
            val loop = mapOf(
                config.inputs.inputIds to tensor(ids, 1, width.toLong()),
                config.inputs.attentionMask to tensor(mask, 1, cl.toLong()),
                config.inputs.positionIds to tensor(positions, 1, width.toLong()),
            )
            val outputs = HashMap<String, OnnxValue>() // what the parts run so far gave, by name
            for (part in parts) {
                val graph = if (prompt) part.prompt else part.decode
                val session = models.session(graph)
                val feed = session.inputNames.associateWith { name ->
                    loop[name] ?: pastTensor(env, name, past)?.also { created.add(it) } ?: outputs[name] as? OnnxTensorLike
                        ?: throw IllegalStateException(
                            "graph '$graph' needs input '$name', which neither the loop, the KV cache nor an earlier part gives",
                        )
                }
                val result = session.run(feed)
                results.add(result)
                for ((name, value) in result) outputs[name] = value
                for ((layer, cache) in layers) {
                    if (layer.part != part.index) continue
                    cache.key.append(present(result, graph, layer.key.present, layer, width), width, tokens.size)
                    cache.value.append(present(result, graph, layer.value.present, layer, width), width, tokens.size)
                }
            }
            filled += tokens.size
            val logits = outputs[config.logits] as? OnnxTensor
                ?: throw IllegalStateException("no part outputs the logits '${config.logits}'")
            return argmaxRow(logits, width, tokens.size - 1)
        } finally {
            results.forEach { it.close() }
            created.forEach { it.close() }
        }
    }

    /** The past entries of the cache input `name` (a layer's key or value): its last `count` slots; null: no cache. */
    private fun pastTensor(env: OrtEnvironment, name: String, count: Int): OnnxTensor? {
        for ((layer, cache) in layers) {
            val half = when (name) {
                layer.key.past -> cache.key
                layer.value.past -> cache.value
                else -> continue
            }
            val bytes = ByteBuffer.wrap(half.last(count)).order(ByteOrder.nativeOrder())
            return OnnxTensor.createTensor(env, bytes, half.shape(count), half.type)
        }
        return null
    }

    /** A layer's new entries as a part's graph output them, [1, heads, width, headDim], as bytes in native order. */
    private fun present(result: OrtSession.Result, graph: String, name: String, layer: KvLayer, width: Int): ByteBuffer {
        val tensor = result.get(name).orElse(null) as? OnnxTensor
            ?: throw IllegalStateException("graph '$graph' gives no '$name' (layer ${layer.layer}'s new cache entries)")
        val expected = listOf(1L, layer.heads.toLong(), width.toLong(), layer.headDim.toLong())
        val shape = tensor.info.shape.toList()
        check(shape == expected) { "graph '$graph' gives '$name' of shape $shape, not $expected" }
        val type = layers.getValue(layer).type
        check(tensor.info.type == type) { "graph '$graph' gives '$name' as ${tensor.info.type}, not $type" }
        return tensor.byteBuffer.order(ByteOrder.nativeOrder())
    }

    /** The greedy token of logits row `row` ([1, width, vocab]): the first index of the largest value. */
    private fun argmaxRow(logits: OnnxTensor, width: Int, row: Int): Int {
        val vocab = config.vocab
        val shape = logits.info.shape.toList()
        check(shape == listOf(1L, width.toLong(), vocab.toLong())) { "logits of shape $shape, not [1, $width, $vocab]" }
        val values = logits.floatBuffer ?: throw IllegalStateException("the logits are not float32")
        var best = 0
        var bestValue = Float.NEGATIVE_INFINITY
        for (i in 0 until vocab) {
            val v = values.get(row * vocab + i)
            if (v > bestValue) {
                best = i
                bestValue = v
            }
        }
        return best
    }

    override fun close() = models.close()

    /** One layer's cache: its key and its value, of elements of `type`. */
    private class Cache(heads: Int, slots: Int, headDim: Int, val type: OnnxJavaType) {
        val key = KvBuffer(heads, slots, headDim, type)
        val value = KvBuffer(heads, slots, headDim, type)

        fun clear() {
            key.clear()
            value.clear()
        }
    }

    companion object {
        /** The token a prompt's last chunk is padded with. */
        const val PAD = 0

        /** The caches' element types this glue keeps, by the manifest's name. */
        private val ELEMENTS = mapOf("float32" to OnnxJavaType.FLOAT, "uint8" to OnnxJavaType.UINT8)

        /** The bundle's generation (Generated.GENERATION); null when it has none. */
        val BUNDLE: GenerationConfig? get() = Generated.GENERATION

        /**
         * Opens the bundle's graphs on the NPU or the CPU (OrtModels.open: the same decision, fallback and log as every
         * graph) and the generation over them. config: null for the bundle's (its manifest's "generation").
         */
        fun open(context: Context, config: GenerationConfig? = null, htpPerformanceMode: String? = null): GenerationSession {
            val models = OrtModels.open(context, htpPerformanceMode)
            val session = try {
                val generation = config ?: models.selection.manifest.generation
                    ?: throw IllegalStateException("this bundle has no generation (manifest \"generation\")")
                GenerationSession(models, generation)
            } catch (e: Exception) {
                models.close()
                throw e
            }
            Log.i(
                QnnRuntime.TAG,
                "generation " + MiniJson.write(
                    linkedMapOf(
                        "provider" to models.decision.provider.id, "reason_key" to models.decision.reasonKey,
                        "parts" to session.config.parts.size.toLong(),
                        "prompt_tokens" to session.config.promptTokens.toLong(),
                        "context_tokens" to session.config.contextTokens.toLong(),
                    ),
                ),
            )
            return session
        }
    }
}

/**
 * One half (key or value) of a layer's cache: [1, heads, slots, headDim] elements of `type` (float32 or uint8) as
 * bytes in native order, right-aligned: the newest entry in the last slot, empty slots (zero bytes) first.
 */
internal class KvBuffer(val heads: Int, val slots: Int, val headDim: Int, val type: OnnxJavaType = OnnxJavaType.FLOAT) {
    /** The bytes of one entry of one head. */
    private val entry = headDim * (if (type == OnnxJavaType.UINT8) 1 else 4)
    val data = ByteArray(heads * slots * entry)

    fun clear() = data.fill(0)

    fun shape(count: Int): LongArray = longArrayOf(1, heads.toLong(), count.toLong(), headDim.toLong())

    /** The last `count` slots of every head, [1, heads, count, headDim]. */
    fun last(count: Int): ByteArray {
        val out = ByteArray(heads * count * entry)
        for (h in 0 until heads) {
            System.arraycopy(data, (h * slots + slots - count) * entry, out, h * count * entry, count * entry)
        }
        return out
    }

    /** Drops the oldest `keep` slots and writes the first `keep` of `entries` ([1, heads, width, headDim]) at the end. */
    fun append(entries: ByteBuffer, width: Int, keep: Int) {
        val row = slots * entry
        for (h in 0 until heads) {
            val base = h * row
            System.arraycopy(data, base + keep * entry, data, base, (slots - keep) * entry)
            entries.position(h * width * entry)
            entries.get(data, base + (slots - keep) * entry, keep * entry)
        }
    }
}
