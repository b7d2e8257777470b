package com.example.qnnsample.qnndeploy

import java.io.File
import java.io.IOException
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicInteger
import kotlin.concurrent.thread

// The third path of the decision (npuSource "on-device"): the phone's SoC has no bundle target, so ONNX Runtime's
// QNN EP compiles the bundle's ONNX for it at first run, under a time budget, and writes the EP context into app
// storage; later runs load that cache. Plain Kotlin (no Android imports): tested on the JVM.

/** How the on-device NPU sessions were opened: from the cache, or compiled now in compileS seconds. */
data class OnDeviceOpen(val cacheHit: Boolean, val compileS: Double?, val folder: File)

/** An on-device compile that failed or ran out of its budget; reason is why (Reasons.onDeviceCompileFailed/Timeout). */
class OnDeviceCompileException internal constructor(val reason: Reason, cause: Throwable? = null) :
    Exception(reason.text, cause)

/**
 * The compiled EP contexts of this phone in app storage: [folder] holds <graph>_ctx.onnx per graph (and the .bin the
 * EP writes beside each, ep.context_embed_mode=0) and key.json, what they were compiled for: the app version, the
 * bundle version, the QNN runtime version and the SoC. Another key (an app or bundle update, another QNN runtime, a
 * backup restored on another phone) deletes the folder and compiles again. A compile writes into a temporary folder
 * of its own, renamed into place only once every graph compiled, so a half-made compile is never loaded.
 */
internal class OnDeviceCache(val root: File, key: Map<String, Any?>, private val self: ProcessStamp) {
    private val key: String = MiniJson.write(key)
    val folder = File(root, "ctx")

    fun contextFile(dir: File, graph: String): File = File(dir, "${graph}_ctx.onnx")

    /** Whether the folder holds a finished compile of these graphs for this key. */
    fun hit(graphs: Collection<String>): Boolean {
        val written = File(folder, KEY)
        return written.isFile && written.readText() == key && graphs.all { contextFile(folder, it).isFile }
    }

    /**
     * A new, empty folder for a compile, named after this process (ctx-PID-START-N.partial). What is there and is
     * not a hit for this key goes: the cache of an older key, and the temporary folders of compiles that can no
     * longer finish because their process ended. Those of a process that still runs are left to it: another
     * process of the app may be compiling at the same time, and this one's own abandoned compile deletes its folder
     * when it ends.
     */
    fun begin(): File {
        folder.deleteRecursively()
        root.listFiles().orEmpty().filter { it.name.endsWith(PARTIAL) && !ofARunningProcess(it.name) }
            .forEach { it.deleteRecursively() }
        if (!root.isDirectory && !root.mkdirs()) throw IOException("cannot create $root")
        val temp = File(root, "ctx-${self.pid}-${self.start}-${System.nanoTime()}$PARTIAL")
        if (!temp.mkdir()) throw IOException("cannot create $temp")
        return temp
    }

    /** Whether a temporary folder's name is that of a process that still runs (the same pid and start time). */
    private fun ofARunningProcess(name: String): Boolean {
        val parts = name.removeSuffix(PARTIAL).split('-')
        val pid = parts.getOrNull(1)?.toIntOrNull() ?: return false
        val start = parts.getOrNull(2)?.toLongOrNull() ?: return false
        val now = ProcessStamp.of(pid)
        return start >= 0 && now.start == start && now.running()
    }

    /** Puts a finished compile in place: key.json written last into it, then the folder renamed to [folder]. */
    fun commit(temp: File) {
        File(temp, KEY).writeText(key)
        folder.deleteRecursively()
        if (!temp.renameTo(folder)) throw IOException("cannot rename $temp to $folder")
    }

    /** Deletes the cache, e.g. when it failed to load: the next compile starts from nothing. */
    fun clear() {
        folder.deleteRecursively()
    }

    private companion object {
        const val KEY = "key.json"
        const val PARTIAL = ".partial"
    }
}

internal object OnDeviceCompile {
    /** How often the caller's progress callback is called while a compile runs. */
    const val PROGRESS_INTERVAL_MS = 500L

    /** The name of the thread that runs a compile: one per compile. */
    const val WORKER = "qnndeploy-on-device-compile"

    private const val RUNNING = 0
    private const val FINISHING = 1
    private const val ABANDONED = 2

    /**
     * Runs [work] on a worker thread and waits for it up to [budgetS] seconds, calling [progress] on this thread with
     * the seconds elapsed every PROGRESS_INTERVAL_MS. What the worker made is handed to [commit] on the worker (the
     * cache renamed into place) and returned. Past the budget this throws OnDeviceCompileException (reason
     * on_device_timeout) and the worker is abandoned: the native session creation of ONNX Runtime cannot be
     * cancelled, so the thread runs on, but once it ends it gives what it made to [abandon] (sessions closed, its
     * temporary folder deleted) and never calls commit: it does not touch the cache after the deadline.
     * A failure of work (which closes what it opened) or of commit goes to abandon too, and is thrown here as
     * OnDeviceCompileException (reason on_device_compile_failed).
     */
    fun <T : Any> withinBudget(
        budgetS: Double,
        progress: ((Double) -> Unit)?,
        work: () -> T,
        commit: (T) -> Unit,
        abandon: (T?) -> Unit,
    ): T {
        val state = AtomicInteger(RUNNING)
        val done = CountDownLatch(1)
        var result: T? = null
        var failure: Throwable? = null
        val start = System.nanoTime()
        thread(name = WORKER, isDaemon = true) {
            var made: T? = null
            val error = try {
                made = work()
                null
            } catch (e: Throwable) {
                e
            }
            if (!state.compareAndSet(RUNNING, FINISHING)) {
                quietly { abandon(made) }
                return@thread
            }
            if (error != null) {
                quietly { abandon(null) }
                failure = error
            } else {
                try {
                    commit(made!!)
                    result = made
                } catch (e: Throwable) {
                    quietly { abandon(made) }
                    failure = e
                }
            }
            done.countDown()
        }
        val budgetNs = (budgetS * 1e9).toLong()
        try {
            while (true) {
                val left = budgetNs - (System.nanoTime() - start)
                if (left <= 0) {
                    if (state.compareAndSet(RUNNING, ABANDONED)) {
                        throw OnDeviceCompileException(Reasons.onDeviceTimeout(budget = seconds(budgetS)))
                    }
                    done.await() // the worker finished in time and is putting its result in place
                    break
                }
                if (done.await(minOf(left, TimeUnit.MILLISECONDS.toNanos(PROGRESS_INTERVAL_MS)), TimeUnit.NANOSECONDS)) break
                progress?.invoke((System.nanoTime() - start) / 1e9)
            }
        } catch (e: InterruptedException) {
            // the opening thread was interrupted: its compile is abandoned as a late one is, and cleans up after itself
            state.compareAndSet(RUNNING, ABANDONED)
            throw e
        }
        failure?.let { throw OnDeviceCompileException(Reasons.onDeviceCompileFailed(error = it.message ?: it.javaClass.name), it) }
        return checkNotNull(result)
    }

    /** Cleanup on the worker: an exception that escaped a thread would end the app's process on Android. */
    private inline fun quietly(block: () -> Unit) {
        try {
            block()
        } catch (e: Exception) {
            // nothing left to tell: the compile's outcome is decided, and a leftover folder goes at the next begin()
        }
    }

    /** A number of seconds as people write it: 60, 2.5. */
    fun seconds(value: Double): String =
        if (value == Math.floor(value) && value < 1e15) value.toLong().toString() else value.toString()
}
