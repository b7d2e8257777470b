package qnndeploy.tests

// JVM tests of the glue's GenerationSession (templates/glue/kotlin/ort/Generation.kt), a decoder LLM's greedy
// generation over a bundle's prompt and decode graphs in parts. tests/scaffold/test_kotlin.py compiles this with the
// glue rendered for com.example.qnnsample and runs:
//   qnndeploy.tests.GenerationTests SETUP_JSON
// SETUP_JSON names an assets folder holding a generation bundle (its manifest's "generation": 2 parts of one layer
// each, N = 4 prompt tokens, context 16; the model files are placeholders with the manifest's sha256), a scratch
// folder, and phones with the decision the Python twin (qnndeploy/decide/decision.py) makes for each.
// No model can run here: ONNX Runtime's sessions are the stand-ins of tests/kotlin/stubs, whose STAND_IN_MODEL is the
// FakeDecoder below, a deterministic function of its inputs that also checks them (mask, positions, cache layout).

import ai.onnxruntime.OnnxJavaType
import ai.onnxruntime.OnnxTensor
import ai.onnxruntime.OnnxTensorLike
import ai.onnxruntime.OrtEnvironment
import ai.onnxruntime.OrtException
import ai.onnxruntime.OrtSession
import android.os.Build
import com.example.qnnsample.qnndeploy.AndroidHost
import com.example.qnnsample.qnndeploy.BundleManifest
import com.example.qnnsample.qnndeploy.GenerationConfig
import com.example.qnnsample.qnndeploy.GenerationSession
import com.example.qnnsample.qnndeploy.MiniJson
import com.example.qnnsample.qnndeploy.Provider
import com.example.qnnsample.qnndeploy.QnnRuntime
import com.example.qnnsample.qnndeploy.StopReason
import qnndeploy.testsupport.FakeContext
import qnndeploy.testsupport.runTests
import java.io.File
import java.nio.ByteBuffer
import java.nio.FloatBuffer
import kotlin.test.assertEquals
import kotlin.test.assertFailsWith
import kotlin.test.assertTrue

/** One run of a graph as the fake model saw it: its graph, its first position, the cache entries its mask opened. */
internal data class Run(val graph: String, val position: Int, val valid: Int)

/**
 * A two-part decoder of one layer per part, standing in for the bundle's model files (the graph is the file's name).
 * Part 1 reads input_ids, attention_mask, position_ids and layer 0's cache; its new entries encode each token (key:
 * token + h/2 + d/4) and its position (value: position + h/4 + d/8); it outputs "hidden" = (the sum of every token
 * so far, read from the cache and the chunk, causally; the position) and the mask as floats ("mask_f"), which part
 * 2 reads instead of the loop's inputs, with layer 1's cache (key: the hidden sum, value: the position). The logits
 * peak at (sum + 3 * position + 1) mod vocab. So the next token depends on every token of the cache: an entry lost,
 * doubled or misplaced changes it. Each run also checks its inputs: shapes, a right-aligned mask (zeros, then ones
 * for the cache's entries and the chunk), positions that go on from the entries, and empty slots of zeros.
 */
internal class FakeDecoder(private val config: GenerationConfig) : OrtSession.StandInModel {
    val runs = ArrayList<Run>()

    /** The runs that read and wrote their cache as uint8 (an NPU wrapper of a layer whose npuDtype is "uint8"). */
    var byteRuns = 0

    /** Every run's graph and inputs (name -> its numbers, flat), for the loop's twin test (GenerationTrace). */
    val trace = ArrayList<Map<String, Any>>()
    private val inputs = config.inputs
    private val cl = config.contextTokens

    private fun graph(modelPath: String): String = File(modelPath).name.removeSuffix(".onnx").removeSuffix("_ctx")

    private fun part(graph: String) = config.parts.firstOrNull { graph == it.prompt || graph == it.decode }
        ?: throw OrtException("fake decoder: no part has graph $graph")

    private fun layerOf(part: Int) = config.kv.single { it.part == part }

    override fun inputNames(modelPath: String): Set<String> {
        val part = part(graph(modelPath))
        val layer = layerOf(part.index)
        val own = if (part.index == 1) listOf(inputs.inputIds, inputs.attentionMask, inputs.positionIds) else listOf("hidden", "mask_f")
        return LinkedHashSet(own + listOf(layer.key.past, layer.value.past))
    }

    override fun run(modelPath: String, feed: Map<String, OnnxTensorLike>): Map<String, OnnxTensor> {
        val graph = graph(modelPath)
        val part = part(graph)
        trace.add(mapOf("graph" to graph, "inputs" to feed.mapValues { (_, t) -> numbers(t as OnnxTensor) }))
        val width = if (graph == part.prompt) config.promptTokens else 1
        val past = cl - width
        val layer = layerOf(part.index)
        val heads = layer.heads
        val dim = layer.headDim
        fun tensor(name: String, shape: List<Long>): OnnxTensor {
            val t = feed[name] as? OnnxTensor ?: throw OrtException("$graph: no input $name")
            if (t.info.shape.toList() != shape) throw OrtException("$graph: $name has shape ${t.info.shape.toList()}, not $shape")
            return t
        }
        fun floats(name: String, shape: List<Long>): FloatArray =
            tensor(name, shape).floatBuffer?.let { b -> FloatArray(b.remaining()).also { b.get(it) } }
                ?: throw OrtException("$graph: $name is not float32")
        fun ints(name: String, shape: List<Long>): IntArray =
            tensor(name, shape).intBuffer?.let { b -> IntArray(b.remaining()).also { b.get(it) } }
                ?: throw OrtException("$graph: $name is not int32")
        // uint8 on an NPU wrapper whose layer the bundle keeps so: entries of whole numbers (steps of 2 and 1 per head
        // and dim), read back from the bytes; part 2 keeps positions in its key instead of the sums, which outgrow a byte
        val bytes = modelPath.endsWith("_ctx.onnx") && layer.npuDtype == "uint8"
        if (bytes) byteRuns++
        val keyStep = if (bytes) 2f else KEY_STEP
        val valueStep = if (bytes) 2f else VALUE_STEP
        fun cache(name: String, shape: List<Long>): FloatArray {
            if (!bytes) return floats(name, shape)
            val t = tensor(name, shape)
            if (t.info.type != OnnxJavaType.UINT8) throw OrtException("$graph: $name is ${t.info.type}, not uint8")
            val b = t.byteBuffer
            return FloatArray(b.remaining()) { (b.get(it).toInt() and 0xFF).toFloat() }
        }
        fun kv(data: FloatArray, vararg shape: Int): OnnxTensor =
            if (!bytes) out(data, *shape) else OnnxTensor.createTensor(
                OrtEnvironment.getEnvironment(), ByteBuffer.wrap(ByteArray(data.size) { data[it].toInt().toByte() }),
                shape.map { it.toLong() }.toLongArray(), OnnxJavaType.UINT8,
            )
        val kvShape = listOf(1L, heads.toLong(), past.toLong(), dim.toLong())
        val pastKey = cache(layer.key.past, kvShape)
        val pastValue = cache(layer.value.past, kvShape)

        val mask: FloatArray
        val sums: FloatArray // per token of the chunk: the sum of every token up to it
        val positions: IntArray
        if (part.index == 1) {
            val ids = ints(inputs.inputIds, listOf(1, width.toLong()))
            mask = ints(inputs.attentionMask, listOf(1, cl.toLong())).map { it.toFloat() }.toFloatArray()
            positions = ints(inputs.positionIds, listOf(1, width.toLong()))
            val valid = checkMask(graph, mask, width)
            for (j in 0 until width) {
                if (positions[j] != valid + j) throw OrtException("$graph: positions ${positions.toList()} after $valid entries")
            }
            var sum = checkPast(graph, pastKey, pastValue, heads, past, dim, valid, keyStep, valueStep)
                .sumOf { it.toDouble() }.toFloat()
            sums = FloatArray(width) { j -> (sum + ids[j]).also { sum = it } }
            runs.add(Run(graph, positions[0], valid))
            val key = entries(heads, width, dim, keyStep) { j -> ids[j].toFloat() }
            val value = entries(heads, width, dim, valueStep) { j -> positions[j].toFloat() }
            val hidden = FloatArray(width * 2) { if (it % 2 == 0) sums[it / 2] else positions[it / 2].toFloat() }
            return linkedMapOf(
                layer.key.present to kv(key, 1, heads, width, dim), layer.value.present to kv(value, 1, heads, width, dim),
                "hidden" to out(hidden, 1, width, 2), "mask_f" to out(mask, 1, cl),
            )
        }
        mask = floats("mask_f", listOf(1, cl.toLong()))
        val hidden = floats("hidden", listOf(1, width.toLong(), 2))
        val valid = checkMask(graph, mask, width)
        val earlier = checkPast(graph, pastKey, pastValue, heads, past, dim, valid, keyStep, valueStep)
        if (earlier.zipWithNext().any { (a, b) -> b < a }) throw OrtException("$graph: the cache's sums go down: $earlier")
        sums = FloatArray(width) { hidden[2 * it] }
        positions = IntArray(width) { hidden[2 * it + 1].toInt() }
        runs.add(Run(graph, positions[0], valid))
        val vocab = config.vocab
        val logits = FloatArray(width * vocab)
        for (j in 0 until width) {
            val next = ((sums[j].toInt() + 3 * positions[j] + 1) % vocab)
            for (i in 0 until vocab) logits[j * vocab + i] = -Math.abs(i - next).toFloat()
        }
        return linkedMapOf(
            layer.key.present to kv(entries(heads, width, dim, keyStep) { j -> if (bytes) positions[j].toFloat() else sums[j] }, 1, heads, width, dim),
            layer.value.present to kv(entries(heads, width, dim, valueStep) { j -> positions[j].toFloat() }, 1, heads, width, dim),
            config.logits to out(logits, 1, width, vocab),
        )
    }

    private fun numbers(t: OnnxTensor): List<Any> =
        t.floatBuffer?.let { b -> List(b.remaining()) { b.get(it).toDouble() } }
            ?: t.intBuffer?.let { b -> List(b.remaining()) { b.get(it).toLong() } }
            ?: t.byteBuffer.let { b -> List(b.remaining()) { (b.get(it).toInt() and 0xFF).toLong() } }

    /** Zeros, then ones to the end, at least `width` of them (the chunk); returns the cache entries it opens. */
    private fun checkMask(graph: String, mask: FloatArray, width: Int): Int {
        val zeros = mask.indexOfFirst { it != 0f }.let { if (it < 0) mask.size else it }
        if (mask.drop(zeros).any { it != 1f } || mask.size - zeros < width) {
            throw OrtException("$graph: the mask is not right-aligned: ${mask.toList()}")
        }
        return mask.size - zeros - width
    }

    /**
     * The past entries: empty slots (all zeros) first, then `valid` entries whose values give positions 0, 1, ...
     * in order; returns what each entry's key holds (its token, or its sum), oldest first.
     */
    private fun checkPast(
        graph: String, key: FloatArray, value: FloatArray, heads: Int, slots: Int, dim: Int, valid: Int,
        keyStep: Float, valueStep: Float,
    ): List<Float> {
        val empty = slots - valid
        val held = ArrayList<Float>()
        for (h in 0 until heads) for (slot in 0 until slots) for (d in 0 until dim) {
            val i = (h * slots + slot) * dim + d
            if (slot < empty) {
                if (key[i] != 0f || value[i] != 0f) throw OrtException("$graph: empty slot $slot of head $h is not zero")
                continue
            }
            val position = slot - empty
            if (value[i] != position + h * valueStep + d * valueStep / 2) {
                throw OrtException("$graph: slot $slot of head $h holds position ${value[i]}, not entry $position")
            }
            val base = key[i] - h * keyStep - d * keyStep / 2
            if (h == 0 && d == 0) held.add(base) else if (base != held[position]) throw OrtException("$graph: slot $slot differs across heads")
        }
        return held
    }

    /** [1, heads, width, dim] new entries: for token j at head h and dim d, f(j) + h * step + d * step / 2. */
    private fun entries(heads: Int, width: Int, dim: Int, step: Float, f: (Int) -> Float): FloatArray =
        FloatArray(heads * width * dim) {
            val h = it / (width * dim)
            f(it / dim % width) + h * step + it % dim * step / 2
        }

    private fun out(data: FloatArray, vararg shape: Int): OnnxTensor =
        OnnxTensor.createTensor(OrtEnvironment.getEnvironment(), FloatBuffer.wrap(data), shape.map { it.toLong() }.toLongArray())

    private companion object {
        const val KEY_STEP = 0.5f
        const val VALUE_STEP = 0.25f
    }
}

/** What the Python twin decides for a phone whose Build.SOC_MODEL is soc, on the generation bundle. */
internal data class TwinDecision(val soc: String, val provider: String, val reasonKey: String, val reason: String, val paths: Map<String, String>)

internal class GenerationSuite(private val assets: File, private val scratch: File, private val phones: List<TwinDecision>) {
    private val manifest = BundleManifest.parse(File(assets, "qnndeploy/manifest.json").readText())
    private val config = checkNotNull(manifest.generation) { "the test bundle has a generation" }
    private var apps = 0

    /** The model's tokens by its rule, computed apart from any cache: next = (sum of all tokens + 3 * position + 1) mod vocab. */
    private fun reference(prompt: List<Int>, count: Int): List<Int> {
        val tokens = prompt.toMutableList()
        repeat(count) { tokens.add((tokens.sum() + 3 * (tokens.size - 1) + 1) % config.vocab) }
        return tokens.drop(prompt.size)
    }

    /** The model files the sessions were created from, in order (bundle paths). */
    private val created = ArrayList<String>()
    private val shared = ArrayList<String?>()

    /** A fresh app on a phone whose SoC is `soc`, the fake decoder as every session's model; block gets the app. */
    private fun <T> onPhone(
        soc: String, failNpu: Boolean = false, model: GenerationConfig = config, block: (FakeContext, FakeDecoder) -> T,
    ): T {
        Build.VERSION.SDK_INT = 35
        Build.SOC_MODEL = soc
        QnnRuntime.forget()
        QnnRuntime.host = FakeHost()
        val decoder = FakeDecoder(model)
        OrtSession.STAND_IN_MODEL = decoder
        created.clear()
        shared.clear()
        val root = File(scratch, "app${apps++}")
        OrtEnvironment.STAND_IN_CREATE = OrtEnvironment.StandInCreate { model, options ->
            if (failNpu && model.endsWith("_ctx.onnx")) throw OrtException("stand-in: QNN context load failed (err 1002)")
            created.add(File(model).relativeTo(File(root, "files/qnndeploy")).invariantSeparatorsPath)
            shared.add(options.standInConfig["ep.share_ep_contexts"])
        }
        try {
            return block(FakeContext(assets, File(root, "files"), LIB_DIR, "com.example.qnnsample"), decoder)
        } finally {
            OrtSession.STAND_IN_MODEL = null
            OrtEnvironment.STAND_IN_CREATE = null
            QnnRuntime.host = AndroidHost
            QnnRuntime.forget()
        }
    }

    private fun <T> session(soc: String = "SM8750", block: (GenerationSession, FakeDecoder) -> T): T = onPhone(soc) { app, decoder ->
        GenerationSession.open(app, config).use { block(it, decoder) }
    }

    private val prompt10 = listOf(5, 1, 4, 1, 5, 9, 2, 6, 5, 3)

    fun tests(): List<Pair<String, () -> Unit>> = listOf(
        "each phone takes the Python twin's decision, and its generation runs the decided files: NPU wrappers sharing a context, or the CPU's ONNX" to {
            assertTrue(phones.map { it.provider }.toSet() == setOf("npu", "cpu"), "the phones cover both paths: $phones")
            for (phone in phones) {
                onPhone(phone.soc) { app, _ ->
                    GenerationSession.open(app, config).use { session ->
                        val d = session.decision
                        assertEquals(phone, TwinDecision(phone.soc, d.provider.id, d.reasonKey, d.reason, d.paths), phone.soc)
                        assertEquals(config.graphs.map { phone.paths.getValue(it) }.sorted(), created.sorted(), phone.soc)
                        // NPU: each part's prompt and decode graph load one weight-shared context binary
                        val share = if (d.provider == Provider.NPU) "1" else null
                        assertEquals(List(created.size) { share }, shared, phone.soc)
                        val got = session.generate(prompt10, maxTokens = 4)
                        assertEquals(reference(prompt10, 4), got.tokens, phone.soc)
                        assertEquals(StopReason.MAX_TOKENS, got.stop)
                    }
                }
            }
        },
        "a prompt longer than N, not a multiple of it, runs in chunks of N then one decode step per token, the cache right-aligned" to {
            session { session, decoder ->
                val got = session.generate(prompt10, maxTokens = 3)
                assertEquals(reference(prompt10, 3), got.tokens)
                assertEquals(10, got.promptTokens)
                val steps = listOf(
                    "prompt" to 0, "prompt" to 4, "prompt" to 8, // chunks of 4, 4 and 2 real tokens (padded to 4)
                    "decode" to 10, "decode" to 11, // the first token came from the prompt's last chunk
                )
                val expected = steps.flatMap { (kind, at) -> listOf(Run("lm-p1-$kind", at, at), Run("lm-p2-$kind", at, at)) }
                assertEquals(expected, decoder.runs)
            }
        },
        "prompts of exactly N tokens, of N + 1 and of one token give the reference's tokens; a last single token runs through the decode graph" to {
            session { session, decoder ->
                val firstRuns = mapOf(
                    listOf(7, 7, 7, 7) to listOf(Run("lm-p1-prompt", 0, 0), Run("lm-p2-prompt", 0, 0), Run("lm-p1-decode", 4, 4)),
                    listOf(1, 2, 3, 4, 5) to listOf(Run("lm-p1-prompt", 0, 0), Run("lm-p2-prompt", 0, 0), Run("lm-p1-decode", 4, 4)),
                    listOf(11) to listOf(Run("lm-p1-decode", 0, 0), Run("lm-p2-decode", 0, 0), Run("lm-p1-decode", 1, 1)),
                )
                for ((prompt, runs) in firstRuns) {
                    decoder.runs.clear()
                    assertEquals(reference(prompt, 6), session.generate(prompt, maxTokens = 6).tokens, "$prompt")
                    assertEquals(runs, decoder.runs.take(3), "$prompt")
                }
            }
        },
        "each generation starts from an empty cache" to {
            session { session, _ ->
                val first = session.generate(prompt10, maxTokens = 5)
                session.generate(listOf(3, 3), maxTokens = 5)
                assertEquals(first, session.generate(prompt10, maxTokens = 5).copy(promptMs = first.promptMs, decodeMs = first.decodeMs))
            }
        },
        "a stop token ends the generation and is not among its tokens; onToken sees each token as it comes" to {
            val all = reference(prompt10, 6)
            val stop = all[3]
            val want = all.takeWhile { it != stop }
            session { session, _ ->
                val seen = ArrayList<Int>()
                val got = session.generate(prompt10, maxTokens = 6, stopTokens = setOf(stop)) { seen.add(it) }
                assertEquals(want, got.tokens)
                assertEquals(want, seen)
                assertEquals(StopReason.STOP_TOKEN, got.stop)
            }
        },
        "the generation stops when the cache is full: every position up to CL - 2 was run, CL - 1 entries kept" to {
            session { session, decoder ->
                val got = session.generate(prompt10, maxTokens = 100)
                val cl = config.contextTokens
                assertEquals(StopReason.CONTEXT_FULL, got.stop)
                assertEquals(reference(prompt10, cl - 1 - prompt10.size + 1), got.tokens)
                assertEquals(Run("lm-p2-decode", cl - 2, cl - 2), decoder.runs.last())
            }
        },
        "the longest prompt that fits is CL - 1 here (fewer where the chunks bind); a longer one, an empty one or a token outside the vocabulary is refused before any run" to {
            assertEquals(15, config.maxPromptTokens)
            // at context 11 the chunk limit binds: a 10-token prompt's chunk at 8 would read more than 11 - 4 entries
            assertEquals(9, config.copy(contextTokens = 11).maxPromptTokens)
            assertEquals(0, config.copy(contextTokens = 4).maxPromptTokens)
            session { session, decoder ->
                val longest = List(15) { it % 3 }
                val got = session.generate(longest, maxTokens = 10)
                assertEquals(reference(longest, 1), got.tokens) // its logits give one token; the cache is full
                assertEquals(StopReason.CONTEXT_FULL, got.stop)
                decoder.runs.clear()
                for (bad in listOf(List(16) { 1 }, emptyList(), listOf(1, config.vocab), listOf(-1))) {
                    assertFailsWith<IllegalArgumentException>("$bad") { session.generate(bad, maxTokens = 3) }
                }
                assertEquals(emptyList(), decoder.runs)
            }
        },
        "when the NPU sessions fail to open, the generation runs on the CPU and says why" to {
            onPhone("SM8750", failNpu = true) { app, _ ->
                GenerationSession.open(app, config).use { session ->
                    assertEquals(Provider.CPU, session.decision.provider)
                    assertEquals("npu_init_failed", session.decision.reasonKey)
                    assertTrue("err 1002" in session.decision.reason, session.decision.reason)
                    assertTrue(created.all { it.startsWith("cpu/") } && created.size == 4, "$created")
                    assertEquals(reference(prompt10, 3), session.generate(prompt10, maxTokens = 3).tokens)
                }
            }
        },
        "no tensor stays open after a generation, nor after a failed run; closing the session closes its sessions" to {
            val open = OnnxTensor.OPEN.get()
            val closed = OrtSession.CLOSED.get()
            session { session, _ ->
                session.generate(prompt10, maxTokens = 4)
                assertEquals(open, OnnxTensor.OPEN.get(), "tensors left open")
                var runs = 0
                OrtSession.STAND_IN_RUN = OrtSession.StandInRun { if (++runs == 7) throw OrtException("stand-in run failed") }
                try {
                    assertFailsWith<OrtException> { session.generate(prompt10, maxTokens = 4) }
                } finally {
                    OrtSession.STAND_IN_RUN = null
                }
                assertEquals(open, OnnxTensor.OPEN.get(), "tensors left open by the failed run")
                assertEquals(reference(prompt10, 4), session.generate(prompt10, maxTokens = 4).tokens, "the next one starts afresh")
            }
            assertEquals(closed + 4, OrtSession.CLOSED.get())
        },
        "a cache the bundle's NPU graphs keep in uint8 is fed and appended as bytes on the NPU, as float32 on the CPU, with the same tokens" to {
            val bytes = config.copy(kv = config.kv.map { it.copy(npuDtype = "uint8") })
            for ((soc, runs) in listOf("SM8750" to 10, "SM8350" to 0)) {
                onPhone(soc, model = bytes) { app, decoder ->
                    GenerationSession.open(app, bytes).use { session ->
                        assertEquals(reference(prompt10, 3), session.generate(prompt10, maxTokens = 3).tokens, soc)
                        assertEquals(runs, decoder.byteRuns, soc) // 3 prompt chunks and 2 decode steps, 2 parts each
                    }
                }
            }
        },
        "a part whose graph needs an input nobody gives fails with its name" to {
            val broken = config.copy(inputs = config.inputs.copy(positionIds = "position_idz"))
            onPhone("SM8350") { app, _ ->
                GenerationSession.open(app, broken).use { session ->
                    val e = assertFailsWith<IllegalStateException> { session.generate(prompt10, maxTokens = 2) }
                    assertEquals(
                        "graph 'lm-p1-prompt' needs input 'position_ids', which neither the loop, the KV cache nor an earlier part gives",
                        e.message,
                    )
                }
            }
        },
    )
}

/**
 * The loop's trace for its Python twin (validate's host loop, qnndeploy/model/generation.py's Stepper, run by
 * tests/scaffold/test_kotlin.py on the same fake decoder): per case, the tokens and every run's graph and inputs,
 * on the CPU (a phone whose SoC has no target). Run as qnndeploy.tests.GenerationTrace SETUP_JSON OUT_JSON; the
 * setup's "cases" are [prompt, maxTokens] pairs.
 */
object GenerationTrace {
    @JvmStatic
    fun main(args: Array<String>) {
        val setup = MiniJson.parse(File(args[0]).readText()) as Map<*, *>
        val assets = File(setup["assets"] as String)
        val config = checkNotNull(BundleManifest.parse(File(assets, "qnndeploy/manifest.json").readText()).generation)
        Build.VERSION.SDK_INT = 35
        Build.SOC_MODEL = "SM8350"
        QnnRuntime.forget()
        QnnRuntime.host = FakeHost()
        val decoder = FakeDecoder(config)
        OrtSession.STAND_IN_MODEL = decoder
        val context = FakeContext(assets, File(setup["scratch"] as String), LIB_DIR, "com.example.qnnsample")
        val cases = ArrayList<Map<String, Any>>()
        GenerationSession.open(context).use { session ->
            for (case in setup["cases"] as List<*>) {
                val (prompt, maxTokens) = case as List<*>
                decoder.trace.clear()
                val got = session.generate((prompt as List<*>).map { (it as Long).toInt() }, (maxTokens as Long).toInt())
                cases.add(mapOf("tokens" to got.tokens, "stop" to got.stop.name, "runs" to decoder.trace.toList()))
            }
        }
        File(args[1]).writeText(MiniJson.write(mapOf("cases" to cases)))
    }
}

object GenerationTests {
    @JvmStatic
    fun main(args: Array<String>) {
        val setup = MiniJson.parse(File(args[0]).readText()) as Map<*, *>
        val phones = (setup["phones"] as List<*>).map {
            val p = it as Map<*, *>
            TwinDecision(
                p["soc"] as String, p["provider"] as String, p["reason_key"] as String, p["reason"] as String,
                (p["paths"] as Map<*, *>).entries.associate { (k, v) -> k as String to v as String },
            )
        }
        runTests(GenerationSuite(File(setup["assets"] as String), File(setup["scratch"] as String), phones).tests())
    }
}
