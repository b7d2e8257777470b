package com.example.qnnsample

import ai.onnxruntime.OnnxTensor
import ai.onnxruntime.OrtEnvironment
import android.content.Context
import android.os.Bundle
import android.widget.Button
import android.widget.LinearLayout
import android.widget.ScrollView
import android.widget.TextView
import androidx.activity.ComponentActivity
import androidx.lifecycle.lifecycleScope
import com.example.qnnsample.qnndeploy.Graph
import com.example.qnnsample.qnndeploy.OrtModels
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.SupervisorJob
import kotlinx.coroutines.launch
import kotlinx.coroutines.withContext
import java.nio.FloatBuffer
import java.nio.IntBuffer
import java.nio.LongBuffer

/**
 * The bundle's models, opened once per process. Android makes a new MainActivity on every rotation; they all share
 * these, so a rotation neither opens a second set of NPU contexts nor races the first opening.
 */
object SampleModels {
    private var models: OrtModels? = null

    /** Outlives the screens: closing the models after the last one finished is not cancelled with it. */
    private val scope = CoroutineScope(SupervisorJob() + Dispatchers.Default)

    /** Opens the models on first use (slow: call it off the main thread); later callers wait for them, then share them. */
    @Synchronized
    fun get(context: Context): OrtModels = models ?: OrtModels.open(context.applicationContext).also { models = it }

    /** Runs [block] with the models (opened again if they were released), while no one can close them. */
    @Synchronized
    fun <T> use(context: Context, block: (OrtModels) -> T): T = block(get(context))

    /** Closes the models when the app is done with them: the screen finished, not a rotation. */
    @Synchronized
    fun release() {
        models?.close()
        models = null
    }

    /** release(), off the main thread: it waits for an opening or a timed run under way. */
    fun releaseLater() {
        scope.launch { release() }
    }
}

/** One screen: the phone's SoC, the NPU-or-CPU decision with its reason, and a timed inference on the chosen one. */
class MainActivity : ComponentActivity() {
    private lateinit var status: TextView
    private lateinit var runButton: Button

    @Volatile
    private var models: OrtModels? = null

    override fun onCreate(savedInstanceState: Bundle?) {
        super.onCreate(savedInstanceState)
        status = TextView(this)
        status.setPadding(32, 32, 32, 32)
        status.text = "Choosing NPU or CPU..."
        runButton = Button(this)
        runButton.text = "Run a timed inference"
        runButton.isEnabled = false
        runButton.setOnClickListener { runTimed() }
        val column = LinearLayout(this)
        column.orientation = LinearLayout.VERTICAL
        column.addView(runButton)
        column.addView(status)
        val scroll = ScrollView(this)
        scroll.addView(column)
        setContentView(scroll)

        lifecycleScope.launch {
            val text = withContext(Dispatchers.Default) {
                try {
                    val opened = SampleModels.get(this@MainActivity)
                    models = opened
                    describe(opened)
                } catch (e: Exception) {
                    "Could not open the bundle's models:\n$e"
                }
            }
            status.text = text
            runButton.isEnabled = models != null
        }
    }

    override fun onDestroy() {
        // A rotation destroys this screen too; only a real finish closes the models.
        if (isFinishing) SampleModels.releaseLater()
        super.onDestroy()
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

    private fun runTimed() {
        val opened = models ?: return
        runButton.isEnabled = false
        lifecycleScope.launch {
            val text = withContext(Dispatchers.Default) {
                try {
                    SampleModels.use(this@MainActivity) { describe(it) + "\n" + timedInference(it) }
                } catch (e: Exception) {
                    describe(opened) + "\nInference failed: $e"
                }
            }
            status.text = text
            runButton.isEnabled = true
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
    }
}
