package com.example.qnnsample

import ai.onnxruntime.OnnxTensor
import ai.onnxruntime.OrtEnvironment
import android.app.Application
import androidx.lifecycle.AndroidViewModel
import androidx.lifecycle.viewModelScope
import com.example.qnnsample.qnndeploy.GenerationSession
import com.example.qnnsample.qnndeploy.Graph
import com.example.qnnsample.qnndeploy.OrtModels
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.flow.MutableStateFlow
import kotlinx.coroutines.flow.StateFlow
import kotlinx.coroutines.flow.asStateFlow
import kotlinx.coroutines.launch
import kotlinx.coroutines.sync.Mutex
import kotlinx.coroutines.sync.withLock
import kotlinx.coroutines.withContext
import java.nio.FloatBuffer
import java.nio.IntBuffer
import java.nio.LongBuffer

/** What the screen shows: one text (the SoC, the NPU-or-CPU decision and its reason, timings) and the run button. */
data class SampleUiState(
    val status: String = "Choosing NPU or CPU...",
    val canRun: Boolean = false,
)

/**
 * The screen's state and its work: opening the bundle's models (once, off the main thread), showing the decision,
 * timing an inference on the chosen provider, or, for a bundle with a generation (a decoder LLM), a generation. It outlives a rotation, whose new MainActivity gets this same ViewModel
 * and its state, so a rotation neither opens a second set of NPU contexts nor races the first opening; the models
 * are closed when the screen finishes (onCleared).
 */
class SampleViewModel(application: Application) : AndroidViewModel(application) {
    private val mutableState = MutableStateFlow(SampleUiState())
    val state: StateFlow<SampleUiState> = mutableState.asStateFlow()

    /** Held by whoever uses the models (the opening, a timed run, the closing): they never overlap. */
    private val inUse = Mutex()
    private var models: OrtModels? = null
    private var generation: GenerationSession? = null // over models, when the bundle has a generation

    init {
        viewModelScope.launch {
            mutableState.value = inUse.withLock {
                withContext(Dispatchers.Default) {
                    try {
                        val opened = OrtModels.open(application)
                        models = opened
                        generation = opened.selection.manifest.generation?.let { GenerationSession(opened, it) }
                        SampleUiState(describe(opened), canRun = true)
                    } catch (e: Exception) {
                        SampleUiState("Could not open the bundle's models:\n$e")
                    }
                }
            }
        }
    }

    /** Times an inference on the provider the decision chose; a tap while the models are not ready does nothing. */
    fun runTimed() {
        if (!state.value.canRun) return
        mutableState.value = state.value.copy(canRun = false)
        viewModelScope.launch {
            mutableState.value = inUse.withLock {
                withContext(Dispatchers.Default) {
                    val opened = checkNotNull(models) { "the models are open whenever canRun is" }
                    val text = try {
                        describe(opened) + "\n" + (generation?.let(::timedGeneration) ?: timedInference(opened))
                    } catch (e: Exception) {
                        describe(opened) + "\nInference failed: $e"
                    }
                    SampleUiState(text, canRun = true)
                }
            }
        }
    }

    /**
     * The screen finished (not a rotation). viewModelScope is cancelled by now, but an opening or a timed run under
     * way still uses the models: they are closed after it, off the main thread.
     */
    override fun onCleared() {
        CoroutineScope(Dispatchers.Default).launch {
            inUse.withLock {
                models?.close() // the generation's too
                models = null
                generation = null
            }
        }
    }

    private fun describe(opened: OrtModels): String {
        val d = opened.decision
        return buildString {
            appendLine("SoC: ${d.soc ?: "unknown"} (from ${d.identifiedBy ?: "nothing the phone reports"})")
            appendLine("Runs on: ${d.provider}")
            appendLine("Why: ${d.reason}")
            appendLine()
            for ((graph, path) in d.paths) appendLine("$graph: $path")
        }
    }

    /** Each graph once (the first run, with any warm-up), then RUNS times more, on inputs made from its signature. */
    private fun timedInference(opened: OrtModels): String {
        val env = OrtEnvironment.getEnvironment()
        val out = StringBuilder("${opened.decision.provider} timings\n")
        for (graph in opened.selection.manifest.graphs) {
            val feeds = inputs(env, graph)
            try {
                val session = opened.session(graph.name)
                var start = System.nanoTime()
                session.run(feeds).close()
                val first = (System.nanoTime() - start) / 1e6
                start = System.nanoTime()
                repeat(RUNS) { session.run(feeds).close() }
                val mean = (System.nanoTime() - start) / 1e6 / RUNS
                out.append("${graph.name}: first run %.1f ms, then %.2f ms per run (mean of $RUNS)\n".format(first, mean))
            } finally {
                feeds.values.forEach { it.close() }
            }
        }
        return out.toString()
    }

    /**
     * A greedy generation from a fixed prompt of token ids (the glue has no tokenizer: an app turns its text into
     * ids and back with the bundle's tokenizer file, Selection.tokenizerPath), with its times.
     */
    private fun timedGeneration(session: GenerationSession): String {
        val config = session.config
        val prompt = List(minOf(PROMPT_TOKENS, config.maxPromptTokens)) { (it + 1) % config.vocab }
        val result = session.generate(prompt, maxTokens = GENERATED_TOKENS)
        val steps = result.tokens.size - 1 // the first token comes from the prompt
        return buildString {
            append("${session.decision.provider} generation: ${prompt.size} prompt tokens in %.1f ms".format(result.promptMs))
            if (steps > 0) append(", then %.1f ms per token".format(result.decodeMs / steps))
            append(" (${result.stop.name.lowercase()})\n")
            append("tokens: ${result.tokens.joinToString(" ")}\n")
        }
    }

    /** Inputs of the graph's static shapes (a symbolic dimension counts as 1), filled with a fixed pattern. */
    private fun inputs(env: OrtEnvironment, graph: Graph): Map<String, OnnxTensor> {
        val tensors = LinkedHashMap<String, OnnxTensor>()
        for (input in graph.inputs) {
            val shape = input.shape.map { it ?: 1L }.toLongArray()
            val count = shape.fold(1L) { a, b -> a * b }.toInt()
            tensors[input.name] = when (input.dtype) {
                "float32" -> OnnxTensor.createTensor(env, FloatBuffer.wrap(FloatArray(count) { (it % 17) / 17f }), shape)
                "int32" -> OnnxTensor.createTensor(env, IntBuffer.wrap(IntArray(count) { it % 2 }), shape)
                "int64" -> OnnxTensor.createTensor(env, LongBuffer.wrap(LongArray(count) { it % 2L }), shape)
                else -> {
                    tensors.values.forEach { it.close() }
                    throw IllegalArgumentException(
                        "input ${input.name} is ${input.dtype}; this sample makes float32, int32 and int64 inputs",
                    )
                }
            }
        }
        return tensors
    }

    private companion object {
        const val RUNS = 10

        /** The sample generation's prompt length and the tokens it generates at most. */
        const val PROMPT_TOKENS = 8
        const val GENERATED_TOKENS = 16
    }
}
