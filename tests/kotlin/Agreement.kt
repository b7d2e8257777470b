package qnndeploy.tests

// The Kotlin half of the Python-vs-Kotlin agreement test (tests/test_kotlin.py): reads {"manifests": [...],
// "cases": [...]} (each case: a manifest index, device, library-load outcome, environment, remembered failure),
// runs the generated QnnSelector on each and prints one JSON array: per case the decision (Decision.toJson) and
// the calls the selector made on its host, in order.

import com.example.qnnsample.qnndeploy.DeviceIdentity
import com.example.qnnsample.qnndeploy.MiniJson
import com.example.qnnsample.qnndeploy.QnnSelector
import com.example.qnnsample.qnndeploy.RememberedFailure
import java.io.File

object Agreement {
    @JvmStatic
    fun main(args: Array<String>) {
        val input = MiniJson.parse(File(args[0]).readText()) as Map<*, *>
        val manifests = input["manifests"] as List<*>
        val out = (input["cases"] as List<*>).map { raw ->
            val case = raw as Map<*, *>
            val device = case["device"] as Map<*, *>
            val errors = (case["load_errors"] as Map<*, *>).entries.associate { (k, v) -> k as String to v as String }
            val env = (case["adsp_before"] as String?)?.let { mapOf("ADSP_LIBRARY_PATH" to it) } ?: emptyMap()
            val host = FakeHost(errors, env)
            val remembered = (case["remembered"] as Map<*, *>?)?.let {
                RememberedFailure(it["app_version"] as String, it["bundle_version"] as String, it["message"] as String)
            }
            val decision = QnnSelector.decide(
                manifests[(case["manifest"] as Long).toInt()],
                DeviceIdentity(device["soc_model"] as String?, device["board_platform"] as String?, (device["sdk_int"] as Long).toInt()),
                host,
                case["lib_dir"] as String,
                case["npu_format"] as String,
                case["app_version"] as String,
                remembered,
            )
            "{\"decision\":${decision.toJson()},\"calls\":${MiniJson.write(host.calls)}}"
        }
        println(out.joinToString(",", "[", "]"))
    }
}
