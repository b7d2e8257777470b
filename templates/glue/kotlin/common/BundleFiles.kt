package com.example.qnnsample.qnndeploy

import java.io.File
import java.io.FileOutputStream
import java.io.IOException
import java.io.InputStream
import java.io.RandomAccessFile
import java.security.MessageDigest

/**
 * The bundle's model files in app storage, copied from the APK's assets (engines need real file paths). A CPU
 * model's external data files are bundle files like the others, at the relative path the model names them by, so
 * ONNX Runtime finds them beside the model.
 * A file is copied only when the copy in storage does not have the manifest's sha256; the sha256 of a file already
 * checked is remembered next to it with its size and time, so a start with nothing to do reads no model bytes.
 * root belongs to this class: whatever the bundle does not list is deleted from it, except the names in keep.
 */
internal class BundleFiles(val root: File, private val keep: Set<String> = emptySet(), private val openAsset: (String) -> InputStream) {
    fun file(path: String): File = File(root, path)

    /**
     * Makes every listed bundle path present with the manifest's sha256, then prunes; returns the paths it had to
     * copy. One call at a time, in this process and across the app's processes.
     */
    fun materialize(manifest: BundleManifest, paths: Collection<String>): List<String> = exclusively {
        val expected = manifest.modelFiles.associate { it.path to it.sha256 }
        val copied = ArrayList<String>()
        for (path in paths) {
            val sha256 = expected[path] ?: throw IOException("$path is not a model file of the bundle manifest")
            val target = file(path)
            if (!upToDate(target, sha256)) {
                copy(path, target, sha256)
                copied.add(path)
            }
        }
        prune(expected.keys)
        copied
    }

    /**
     * Deletes from root every file the bundle does not list (models of older bundle versions and of other graphs,
     * copies left half-made) and the folders that become empty; returns what it deleted. It never leaves root:
     * a symbolic link is deleted itself, never followed.
     */
    fun prune(manifest: BundleManifest): List<String> = exclusively {
        prune(manifest.modelFiles.map { it.path }.toSet())
    }

    private fun prune(listed: Set<String>): List<String> {
        val wanted = listed + listed.map { "$it.sha256" } + keep + LOCK_FILE
        val deleted = ArrayList<String>()
        fun walk(dir: File, prefix: String) {
            for (child in dir.listFiles().orEmpty()) {
                val rel = prefix + child.name
                val link = child.canonicalPath != child.path // dir is canonical: only a link resolves elsewhere
                if (child.isDirectory && !link) {
                    walk(child, "$rel/")
                    if (child.list().isNullOrEmpty()) child.delete()
                } else if (rel !in wanted && child.delete()) {
                    deleted.add(rel)
                }
            }
        }
        walk(root.canonicalFile, "")
        return deleted.sorted()
    }

    private fun <T> exclusively(block: () -> T): T = synchronized(LOCK) {
        if (!root.isDirectory && !root.mkdirs()) throw IOException("cannot create $root")
        RandomAccessFile(File(root, LOCK_FILE), "rw").use { lockFile ->
            val lock = lockFile.channel.lock() // another process of the app waits here
            try {
                block()
            } finally {
                lock.release()
            }
        }
    }

    private fun stamp(target: File): File = File(target.path + ".sha256")

    private fun mark(target: File, sha256: String): String = "$sha256 ${target.length()} ${target.lastModified()}"

    private fun upToDate(target: File, sha256: String): Boolean {
        if (!target.isFile) return false
        val stamp = stamp(target)
        if (stamp.isFile && stamp.readText() == mark(target, sha256)) return true
        if (target.inputStream().use { hash(it, null) } != sha256) return false
        stamp.writeText(mark(target, sha256))
        return true
    }

    private fun copy(path: String, target: File, sha256: String) {
        val dir = target.parentFile ?: throw IOException("no folder for $target")
        if (!dir.isDirectory && !dir.mkdirs()) throw IOException("cannot create $dir")
        val partial = File.createTempFile(".${target.name}.", ".partial", dir) // a name of its own for each copy
        val got = try {
            FileOutputStream(partial).use { out ->
                openAsset(path).use { hash(it, out) }.also { out.fd.sync() }
            }
        } catch (e: IOException) {
            partial.delete()
            throw IOException("cannot copy $path from the app's assets to $target: ${e.message}", e)
        }
        if (got != sha256) {
            partial.delete()
            throw IOException("$path in the app's assets has sha256 $got, the manifest says $sha256: the APK holds " +
                "a damaged or different bundle")
        }
        stamp(target).delete()
        if (!partial.renameTo(target)) {
            partial.delete()
            throw IOException("cannot rename $partial to $target")
        }
        stamp(target).writeText(mark(target, sha256))
    }

    private fun hash(input: InputStream, copyTo: FileOutputStream?): String {
        val digest = MessageDigest.getInstance("SHA-256")
        val buffer = ByteArray(1 shl 20)
        while (true) {
            val n = input.read(buffer)
            if (n < 0) break
            digest.update(buffer, 0, n)
            copyTo?.write(buffer, 0, n)
        }
        return digest.digest().joinToString("") { "%02x".format(it) }
    }

    private companion object {
        /** In root: held (a file lock) while files are copied or deleted there. */
        const val LOCK_FILE = ".lock"

        /** Every BundleFiles of the process: a file lock is per process, so threads take turns before it. */
        val LOCK = Any()
    }
}
