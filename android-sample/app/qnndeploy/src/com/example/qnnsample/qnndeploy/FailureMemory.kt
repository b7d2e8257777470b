package com.example.qnnsample.qnndeploy

import java.io.File

/**
 * Remembers a failed NPU init in a small file, so the next starts go straight to the CPU until the app or the
 * bundle version changes. NPU init is marked as begun before it starts: if the process dies inside it (a native
 * crash in a QNN library), the mark is still there at the next start and counts as a failure, so the app does not
 * crash again on every start.
 */
class FailureMemory(private val file: File) {
    fun read(): RememberedFailure? {
        if (!file.isFile) return null
        val record = try {
            MiniJson.parse(file.readText()) as? Map<*, *>
        } catch (e: IllegalArgumentException) {
            null
        } ?: return null
        val message = if (record["pending"] == true) {
            "the app stopped during NPU init, e.g. a crash in a QNN library"
        } else {
            record["message"] as? String ?: "no message"
        }
        return RememberedFailure(record["app_version"] as? String ?: "", record["bundle_version"] as? String ?: "", message)
    }

    fun begin(appVersion: String, bundleVersion: String) =
        write(linkedMapOf("app_version" to appVersion, "bundle_version" to bundleVersion, "pending" to true))

    fun failed(appVersion: String, bundleVersion: String, message: String) = write(
        linkedMapOf("app_version" to appVersion, "bundle_version" to bundleVersion, "pending" to false, "message" to message),
    )

    fun succeeded() {
        file.delete()
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
