package qnndeploy.tests

// JVM tests of the sample app's SampleViewModel (templates/app/kotlin): the screen's state as the ViewModel moves it,
// the models opened once and closed after the work under way. tests/scaffold/test_kotlin.py compiles this with the
// app rendered for com.example.qnnsample and runs:
//   qnndeploy.tests.SampleAppTestsKt ASSETS_DIR SCRATCH_DIR GENERATION_ASSETS_DIR
// ASSETS_DIR is the app's bundle/assets folder (a real bundle); GENERATION_ASSETS_DIR a generation bundle's (that of
// GenerationTests.kt, whose FakeDecoder stands in for its model). The phone reports no SoC here, so the decision is
// the CPU's. AndroidX's ViewModel, AndroidViewModel, ViewModelStore and viewModelScope, and Android's Application,
// are the stand-ins of tests/kotlin/stubs (no AndroidX jars here); the StateFlow is the real kotlinx.coroutines one.
// Sessions, tensors and runs are ONNX Runtime's stand-ins, which a test blocks with STAND_IN_CREATE and STAND_IN_RUN.

import ai.onnxruntime.OrtEnvironment
import ai.onnxruntime.OrtSession
import android.app.Application
import android.content.Context
import androidx.lifecycle.ViewModelStore
import com.example.qnnsample.SampleUiState
import com.example.qnnsample.SampleViewModel
import com.example.qnnsample.qnndeploy.BundleManifest
import com.example.qnnsample.qnndeploy.QnnRuntime
import kotlinx.coroutines.flow.first
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import qnndeploy.testsupport.FakeContext
import qnndeploy.testsupport.runTests
import java.io.File
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit
import kotlin.test.assertEquals
import kotlin.test.assertTrue

/** The app as Android makes it: an Application whose base context is the test's FakeContext. */
internal class TestApplication(base: Context) : Application() {
    init {
        attachBaseContext(base)
    }
}

internal class SampleAppSuite(private val assets: File, private val scratch: File, private val generationAssets: File) {
    private var apps = 0

    /** A fresh app (its own files folder) and its screen's ViewModel in a store, as an activity holds it. */
    private fun screen(assetsDir: File = assets): Pair<SampleViewModel, ViewModelStore> {
        QnnRuntime.forget()
        val context = FakeContext(assetsDir, File(scratch, "app${apps++}"), "/data/app/lib/arm64", "com.example.qnnsample")
        val model = SampleViewModel(TestApplication(context))
        val store = ViewModelStore()
        store.put("screen", model)
        return model to store
    }

    private fun SampleViewModel.awaitState(what: String, test: (SampleUiState) -> Boolean): SampleUiState =
        runBlocking { withTimeout(60_000) { state.first(test) } }.also { assertTrue(test(it), what) }

    private fun await(latch: CountDownLatch) = assertTrue(latch.await(60, TimeUnit.SECONDS), "timed out")

    /** Sessions are closed by a worker after the screen is cleared: waits until `count` more are. */
    private fun awaitClosed(before: Int, count: Int) {
        val end = System.nanoTime() + 60_000_000_000
        while (OrtSession.CLOSED.get() < before + count && System.nanoTime() < end) Thread.sleep(10)
        assertEquals(before + count, OrtSession.CLOSED.get(), "sessions closed")
    }

    private fun ready(model: SampleViewModel) = model.awaitState("the models open") { it.canRun }

    fun tests(): List<Pair<String, () -> Unit>> = listOf(
        "the screen says it is choosing, then shows the decision and takes a run" to {
            val opening = CountDownLatch(1)
            OrtEnvironment.STAND_IN_CREATE = OrtEnvironment.StandInCreate { _, _ -> await(opening) }
            val opened = OrtSession.OPENED.get()
            val (model, store) = screen()
            try {
                assertEquals(SampleUiState("Choosing NPU or CPU...", canRun = false), model.state.value)
                model.runTimed() // a tap before the models are open does nothing
                assertEquals(SampleUiState("Choosing NPU or CPU...", canRun = false), model.state.value)
            } finally {
                OrtEnvironment.STAND_IN_CREATE = null
                opening.countDown()
            }
            val shown = ready(model).status
            assertTrue(shown.startsWith("SoC: unknown (from nothing the phone reports)\nRuns on: CPU\nWhy: "), shown)
            assertTrue(shown.endsWith("\n\ndet: cpu/det.onnx\nrec: cpu/rec.onnx\n"), shown)
            assertEquals(2, OrtSession.OPENED.get() - opened, "one session per graph, opened once")
            store.clear()
        },
        "a timed run disables the button while it runs, then shows the decision and each graph's timings" to {
            val (model, store) = screen()
            val decision = ready(model).status
            val running = CountDownLatch(1)
            val release = CountDownLatch(1)
            OrtSession.STAND_IN_RUN = OrtSession.StandInRun {
                running.countDown()
                await(release)
            }
            try {
                model.runTimed()
                await(running)
                assertEquals(SampleUiState(decision, canRun = false), model.state.value)
                model.runTimed() // a second tap while it runs does nothing
            } finally {
                OrtSession.STAND_IN_RUN = null
                release.countDown()
            }
            val done = model.awaitState("the run ends") { it.canRun }.status
            val timings = done.removePrefix(decision + "\n").lines()
            assertEquals("CPU timings", timings[0], done)
            for ((line, graph) in timings.drop(1).zip(listOf("det", "rec"))) {
                assertTrue(Regex("$graph: first run [0-9.]+ ms, then [0-9.]+ ms per run \\(mean of 10\\)").matches(line), line)
            }
            assertEquals(4, timings.size, done) // the header, two graphs, the last line's end
            store.clear()
        },
        "a failed inference is shown under the decision, and the button takes another run" to {
            val (model, store) = screen()
            val decision = ready(model).status
            OrtSession.STAND_IN_RUN = OrtSession.StandInRun { throw IllegalStateException("stand-in run failed") }
            try {
                model.runTimed()
                val failed = model.awaitState("the run fails") { it.canRun && it.status != decision }
                assertEquals(SampleUiState("$decision\nInference failed: java.lang.IllegalStateException: stand-in run failed", true), failed)
            } finally {
                OrtSession.STAND_IN_RUN = null
            }
            store.clear()
        },
        "models that cannot be opened are shown as such, and the button stays off" to {
            val empty = File(scratch, "no-bundle").apply { mkdirs() }
            val (model, store) = screen(empty)
            val shown = model.awaitState("the opening fails") { it.status.startsWith("Could not open") }
            assertTrue(shown.status.startsWith("Could not open the bundle's models:\n"), shown.status)
            assertEquals(false, shown.canRun)
            model.runTimed()
            assertEquals(shown, model.state.value)
            store.clear()
        },
        "a finished screen closes its models, after a run under way" to {
            val (model, store) = screen()
            ready(model)
            val closed = OrtSession.CLOSED.get()
            val running = CountDownLatch(1)
            val release = CountDownLatch(1)
            OrtSession.STAND_IN_RUN = OrtSession.StandInRun {
                running.countDown()
                await(release)
            }
            try {
                model.runTimed()
                await(running)
                store.clear()
                Thread.sleep(200)
                assertEquals(closed, OrtSession.CLOSED.get(), "closed while a run used them")
            } finally {
                OrtSession.STAND_IN_RUN = null
                release.countDown()
            }
            awaitClosed(closed, 2)
        },
        "with a generation bundle, a run shows a generation from the sample prompt, its times and tokens" to {
            val config = checkNotNull(BundleManifest.parse(File(generationAssets, "qnndeploy/manifest.json").readText()).generation)
            val decoder = FakeDecoder(config)
            OrtSession.STAND_IN_MODEL = decoder
            try {
                val opened = OrtSession.OPENED.get()
                val (model, store) = screen(generationAssets)
                val decision = ready(model).status
                model.runTimed()
                val done = model.awaitState("the generation ends") { it.canRun && it.status != decision }.status
                val shown = done.removePrefix(decision + "\n").lines()
                val header = Regex("CPU generation: 8 prompt tokens in [0-9.]+ ms, then [0-9.]+ ms per token \\(context_full\\)")
                assertTrue(header.matches(shown[0]), done)
                // the prompt 1..8, then tokens by the fake model's rule until the cache (16 - 1 entries) is full: 8 tokens
                val tokens = (1..8).toMutableList()
                repeat(8) { tokens.add((tokens.sum() + 3 * (tokens.size - 1) + 1) % config.vocab) }
                assertEquals("tokens: ${tokens.drop(8).joinToString(" ")}", shown[1], done)
                assertEquals(listOf("lm-p1-prompt", "lm-p2-prompt", "lm-p1-prompt", "lm-p2-prompt"), decoder.runs.take(4).map { it.graph }, "the sample prompt is 8 tokens: two chunks of 4")
                val closed = OrtSession.CLOSED.get()
                store.clear()
                // closed by a worker: waited for, so that the next test counts only its own (a loaded machine once
                // closed these after it had started counting)
                awaitClosed(closed, OrtSession.OPENED.get() - opened)
            } finally {
                OrtSession.STAND_IN_MODEL = null
            }
        },
        "a screen finished while the models open closes them once they are open" to {
            val started = CountDownLatch(1)
            val opening = CountDownLatch(1)
            OrtEnvironment.STAND_IN_CREATE = OrtEnvironment.StandInCreate { _, _ ->
                started.countDown()
                await(opening)
            }
            val closed = OrtSession.CLOSED.get()
            val (model, store) = screen()
            try {
                await(started) // on a phone the opening starts in the constructor (viewModelScope: Main.immediate)
                store.clear()
                assertEquals(SampleUiState("Choosing NPU or CPU...", canRun = false), model.state.value)
            } finally {
                OrtEnvironment.STAND_IN_CREATE = null
                opening.countDown()
            }
            awaitClosed(closed, 2)
        },
    )
}

fun main(args: Array<String>) {
    runTests(SampleAppSuite(File(args[0]), File(args[1]), File(args[2])).tests())
}
