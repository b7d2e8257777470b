package com.example.qnnsample.qnndeploy

import java.io.Closeable
import java.io.IOException
import java.io.RandomAccessFile

// The QAIRT version of the libQnnHtp.so this process loaded, found without JNI: /proc/self/maps names the file
// behind it (the library extracted to the app's native library folder, or the APK it is mapped from at an offset),
// and the library embeds its QNN build marker "v2.51.0.260929181845" (the marker qnndeploy/markers.py BUILD_RE
// finds on the host). Plain Kotlin, no Android imports: it is tested on the JVM with a real libQnnHtp.so.

/** A file read at any offset, which is all the reader needs of one; on a phone: openReadAt (RandomAccessFile). */
internal interface ReadAt : Closeable {
    val size: Long

    /** Reads up to length bytes of the file at offset into buffer at index at; the number read, -1 at the end. */
    fun read(offset: Long, buffer: ByteArray, at: Int, length: Int): Int
}

/** The file at path for reading, or null when it cannot be opened. */
internal fun openReadAt(path: String): ReadAt? = try {
    val file = RandomAccessFile(path, "r")
    object : ReadAt {
        override val size: Long = file.length()

        override fun read(offset: Long, buffer: ByteArray, at: Int, length: Int): Int {
            file.seek(offset)
            return file.read(buffer, at, length)
        }

        override fun close() = file.close()
    }
} catch (e: IOException) {
    null
} catch (e: SecurityException) {
    null
}

internal object RuntimeVersion {
    const val LIBRARY = Generated.BACKEND_LIB

    /** Bytes read at a time: the library is ~100 MB and is never read whole. */
    const val CHUNK = 256 * 1024

    /** Bytes kept from one chunk to the next, so a marker across the border is found (a marker needs 18). */
    const val OVERLAP = 64

    private val MAPS_LINE = Regex("""[0-9a-fA-F]+-[0-9a-fA-F]+ +\S+ +([0-9a-fA-F]{1,16}) +\S+ +[0-9]+ +(/.*)""")

    /** A central directory larger than this is not read (an APK's is a few hundred kB). */
    private const val MAX_CENTRAL_DIRECTORY = 16L * 1024 * 1024

    /**
     * The QAIRT version ("2.51.0") of the library mapped into the process that /proc/self/maps text [maps] describes,
     * read through [open]; null when no mapping names it, its file cannot be read, or it holds no build marker.
     * A library mapped straight from an APK shows the APK's path: the stored APK entry ending in "/libQnnHtp.so"
     * whose data holds a mapped offset is read. The first marker in the file is the version.
     */
    fun fromMaps(maps: String, open: (String) -> ReadAt? = ::openReadAt): String? {
        val mapped = maps.lineSequence().mapNotNull(::mapping).toList()
        for (path in mapped.map { it.second }.filter { it.substringAfterLast('/') == LIBRARY }.distinct()) {
            val found = read(path, open) { file -> scan(file, 0, file.size) }
            if (found != null) return found
        }
        val apks = mapped.filter { it.second.endsWith(".apk") }.groupBy({ it.second }, { it.first })
        for ((path, offsets) in apks) {
            val found = read(path, open) { file ->
                storedEntries(file, "/$LIBRARY")
                    .filter { (start, size) -> offsets.any { it >= start && it < start + size } }
                    .firstNotNullOfOrNull { (start, size) -> scan(file, start, size) }
            }
            if (found != null) return found
        }
        return null
    }

    /** (file offset, path) of a /proc/self/maps line backed by a file ("addr perms offset dev inode /path"). */
    private fun mapping(line: String): Pair<Long, String>? {
        val m = MAPS_LINE.matchEntire(line) ?: return null
        return (m.groupValues[1].toLongOrNull(16) ?: return null) to m.groupValues[2]
    }

    private fun <T> read(path: String, open: (String) -> ReadAt?, use: (ReadAt) -> T?): T? = try {
        open(path)?.use(use)
    } catch (e: IOException) {
        null
    }

    /** The version of the first build marker in [length] bytes at [start], read CHUNK bytes at a time. */
    fun scan(file: ReadAt, start: Long, length: Long): String? {
        val buffer = ByteArray(OVERLAP + CHUNK)
        var kept = 0 // bytes at the buffer's start carried over from the previous chunk
        var offset = start
        val end = minOf(start + length, file.size)
        while (offset < end) {
            val n = file.read(offset, buffer, kept, minOf(CHUNK.toLong(), end - offset).toInt())
            if (n <= 0) return null
            offset += n
            val filled = kept + n
            marker(buffer, filled)?.let { return it }
            kept = minOf(OVERLAP, filled)
            System.arraycopy(buffer, filled - kept, buffer, 0, kept)
        }
        return null
    }

    /**
     * The X.Y.Z of the first "v<1-2 digits>.<1-3>.<1-3>.<6+ digits>" in buffer[0, filled), as BUILD_RE matches it
     * (a digit run of the wrong length fails the match at that "v"; only the last run may go on past 6 digits).
     */
    fun marker(buffer: ByteArray, filled: Int): String? {
        var i = 0
        while (i < filled) {
            if (buffer[i] == 'v'.code.toByte()) {
                var p = i + 1
                var ok = true
                for (max in intArrayOf(2, 3, 3)) {
                    val digits = digitsAt(buffer, p, filled)
                    if (digits !in 1..max || p + digits >= filled || buffer[p + digits] != '.'.code.toByte()) {
                        ok = false
                        break
                    }
                    p += digits + 1
                }
                if (ok && digitsAt(buffer, p, filled) >= 6) {
                    return String(buffer, i + 1, p - 1 - (i + 1), Charsets.ISO_8859_1)
                }
            }
            i++
        }
        return null
    }

    private fun digitsAt(buffer: ByteArray, from: Int, filled: Int): Int {
        var p = from
        while (p < filled && buffer[p] in '0'.code.toByte()..'9'.code.toByte()) p++
        return p - from
    }

    /**
     * (data offset, size) of each stored (not compressed) entry of the zip [file] whose name ends with [suffix]:
     * how Android maps a library straight from an APK. Empty when the file is not a zip this reader understands
     * (no end record in its last 64 kB, a ZIP64 directory, a central directory over 16 MB).
     */
    fun storedEntries(file: ReadAt, suffix: String): List<Pair<Long, Long>> {
        val tailLength = minOf(file.size, 22L + 65535).toInt()
        val tail = bytes(file, file.size - tailLength, tailLength) ?: return emptyList()
        var eocd = tailLength - 22
        while (eocd >= 0 && u32(tail, eocd) != 0x06054b50L) eocd--
        if (eocd < 0) return emptyList()
        val cdSize = u32(tail, eocd + 12)
        val cdOffset = u32(tail, eocd + 16)
        if (cdOffset == 0xFFFFFFFFL || cdSize > MAX_CENTRAL_DIRECTORY || cdOffset + cdSize > file.size) return emptyList()
        val cd = bytes(file, cdOffset, cdSize.toInt()) ?: return emptyList()
        val found = ArrayList<Pair<Long, Long>>()
        var p = 0
        while (p + 46 <= cd.size && u32(cd, p) == 0x02014b50L) {
            val method = u16(cd, p + 10)
            val size = u32(cd, p + 20)
            val nameLength = u16(cd, p + 28)
            val next = p + 46 + nameLength + u16(cd, p + 30) + u16(cd, p + 32)
            if (p + 46 + nameLength > cd.size) break
            val name = String(cd, p + 46, nameLength, Charsets.UTF_8)
            if (method == 0 && name.endsWith(suffix)) {
                val local = u32(cd, p + 42)
                val header = bytes(file, local, 30)
                if (header != null && u32(header, 0) == 0x04034b50L) {
                    found.add(local + 30 + u16(header, 26) + u16(header, 28) to size)
                }
            }
            p = next
        }
        return found
    }

    /** length bytes at offset, or null when the file is shorter. */
    private fun bytes(file: ReadAt, offset: Long, length: Int): ByteArray? {
        val out = ByteArray(length)
        var done = 0
        while (done < length) {
            val n = file.read(offset + done, out, done, minOf(CHUNK, length - done))
            if (n <= 0) return null
            done += n
        }
        return out
    }

    private fun u16(b: ByteArray, at: Int): Int = (b[at].toInt() and 0xff) or ((b[at + 1].toInt() and 0xff) shl 8)

    private fun u32(b: ByteArray, at: Int): Long = u16(b, at).toLong() or (u16(b, at + 2).toLong() shl 16)
}
