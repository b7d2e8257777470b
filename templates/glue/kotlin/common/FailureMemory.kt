package com.example.qnnsample.qnndeploy

import java.io.File
import java.io.IOException

/**
 * Remembers a failed NPU init in a small file, so the next starts go straight to the CPU until the app or the
 * bundle version changes. NPU init is marked as begun before it starts, with the process that runs it: if that
 * process dies inside it, the mark is still there at the next start. Once, that is retried: the user may have closed
 * the app during a first on-device compile (up to the bundle's budget, a minute). Twice in a row, it counts as a
 * failure (a native crash in a QNN library crashes every start), so the app does not crash again on every start. A
 * mark of a process that still runs (this one, or another process of the app) is an init under way, not a failure.
 * self: this process (ProcessStamp.of(android.os.Process.myPid()) on Android).
 */
internal class FailureMemory(private val file: File, private val self: ProcessStamp) {
    fun read(): RememberedFailure? {
        val record = record() ?: return null
        val message = if (record["pending"] == true) {
            if (!ended(record)) return null
            val olderGlue = ProcessStamp.from(record) == null // its mark names no process: a crash, as it counted then
            if (!olderGlue && record["stopped_before"] != true) return null // the first init that ended: retried
            "the app stopped during NPU init twice in a row, e.g. a crash in a QNN library"
        } else {
            record["message"] as? String ?: "no message"
        }
        return RememberedFailure(record["app_version"] as? String ?: "", record["bundle_version"] as? String ?: "", message)
    }

    /** Marks an init as begun; stopped_before says the last one, of the same versions, ended with its process. */
    fun begin(appVersion: String, bundleVersion: String) {
        val last = record()
        val stopped = last != null && last["pending"] == true && ended(last) &&
            last["app_version"] == appVersion && last["bundle_version"] == bundleVersion
        write(
            linkedMapOf(
                "app_version" to appVersion, "bundle_version" to bundleVersion, "pending" to true,
                "stopped_before" to stopped,
            ) + self.toMap(),
        )
    }

    fun failed(appVersion: String, bundleVersion: String, message: String) = write(
        linkedMapOf("app_version" to appVersion, "bundle_version" to bundleVersion, "pending" to false, "message" to message),
    )

    fun succeeded() {
        file.delete()
    }

    private fun record(): Map<*, *>? {
        if (!file.isFile) return null
        return try {
            MiniJson.parse(file.readText()) as? Map<*, *>
        } catch (e: IllegalArgumentException) {
            null
        }
    }

    /** A pending mark whose process has ended (a mark that names no process is an older glue's: ended). */
    private fun ended(record: Map<*, *>): Boolean {
        val writer = ProcessStamp.from(record) ?: return true
        return writer != self && !writer.running()
    }

    private fun write(record: Map<String, Any?>) {
        file.parentFile?.mkdirs()
        val partial = File(file.path + ".partial")
        partial.writeText(MiniJson.write(record))
        if (!partial.renameTo(file)) {
            file.delete()
            partial.renameTo(file)
        }
    }
}

/**
 * One process, told apart from a later one that reuses its pid: its start time (field 22 of /proc/PID/stat, clock
 * ticks after boot) and the boot it ran in. Where /proc cannot be read, start is -1 and the process counts as ended.
 */
internal data class ProcessStamp(val pid: Int, val start: Long, val boot: String) {
    /** Whether this very process still runs: not ended, not a zombie, not a later process with the same pid. */
    fun running(): Boolean = start >= 0 && boot == bootId() && startTime(pid) == start

    fun toMap(): Map<String, Any?> = linkedMapOf("pid" to pid.toLong(), "start" to start, "boot" to boot)

    companion object {
        fun of(pid: Int): ProcessStamp = ProcessStamp(pid, startTime(pid) ?: -1L, bootId())

        /** The stamp in a record written by toMap, or null (a mark of an older glue, which named no process). */
        fun from(record: Map<*, *>): ProcessStamp? {
            val pid = record["pid"] as? Long ?: return null
            val start = record["start"] as? Long ?: return null
            return ProcessStamp(pid.toInt(), start, record["boot"] as? String ?: return null)
        }

        private fun startTime(pid: Int): Long? = try {
            // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so count from its last ')'
            val fields = File("/proc/$pid/stat").readText().substringAfterLast(") ").split(' ')
            if (fields[0] == "Z" || fields[0] == "X") null else fields[19].toLong()
        } catch (e: IOException) {
            null
        } catch (e: RuntimeException) { // a line of another shape: IndexOutOfBounds, NumberFormat
            null
        }

        private fun bootId(): String = try {
            File("/proc/sys/kernel/random/boot_id").readText().trim()
        } catch (e: IOException) {
            ""
        }
    }
}
