package qnndeploy.tests

// The Kotlin half of tests/scaffold/test_kotlin.py's runtime version tests. Reads
//   {"library": the real libQnnHtp.so, "cases": [{"name": ..., "maps": a /proc/self/maps text}]}
// runs the generated RuntimeVersion.fromMaps on each maps text through a reader that counts what it reads, then
// loads the real library into this JVM and asks AndroidHost (the glue's own /proc/self/maps read), and prints
//   {"cases": [{"name", "version", "max_read", "bytes_read"}], "loaded": AndroidHost.qnnRuntimeVersion()}.

import com.example.qnnsample.qnndeploy.AndroidHost
import com.example.qnnsample.qnndeploy.MiniJson
import com.example.qnnsample.qnndeploy.ReadAt
import com.example.qnnsample.qnndeploy.RuntimeVersion
import com.example.qnnsample.qnndeploy.openReadAt
import java.io.File

object RuntimeVersionTests {
    @JvmStatic
    fun main(args: Array<String>) {
        val input = MiniJson.parse(File(args[0]).readText()) as Map<*, *>
        val cases = (input["cases"] as List<*>).map { raw ->
            val case = raw as Map<*, *>
            var maxRead = 0L
            var bytesRead = 0L
            val counting = { path: String ->
                openReadAt(path)?.let { file ->
                    object : ReadAt by file {
                        override fun read(offset: Long, buffer: ByteArray, at: Int, length: Int): Int {
                            maxRead = maxOf(maxRead, length.toLong())
                            return file.read(offset, buffer, at, length).also { if (it > 0) bytesRead += it }
                        }
                    }
                }
            }
            val version = RuntimeVersion.fromMaps(case["maps"] as String, counting)
            linkedMapOf("name" to case["name"], "version" to version, "max_read" to maxRead, "bytes_read" to bytesRead)
        }
        System.load(input["library"] as String)
        val loaded = AndroidHost.qnnRuntimeVersion()
        println(MiniJson.write(linkedMapOf("cases" to cases, "loaded" to loaded)))
    }
}
