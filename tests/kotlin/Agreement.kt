package qnndeploy.tests

// The Kotlin half of the Python-vs-Kotlin agreement test (tests/scaffold/test_kotlin.py). Reads
//   {"manifests": [...], "cases": [...], "archs": [...], "reasons": [{"function": ..., "args": [...]}]}
// (each case: a manifest index, device, library-load outcome, environment, setenv failure, remembered failure,
// the loaded runtime's QAIRT version, the platform info of the QNN backend or null),
// runs the generated QnnSelector on each case, qnnLibraries on each arch, and each Reasons function on its
// arguments, and prints {"cases": [{"decision": Decision.toJson, "calls": the host calls in order, "qnn_options":
// the QNN EP options OrtModels gives an NPU decision (null on the CPU), "graph_options": graph -> the QNN EP options
// of its session, ep_options included (an on-device NPU decision only, else null)}], "libraries": [[backend,
// system, stub, skel]], "reasons": [[key, text]]}.

import com.example.qnnsample.qnndeploy.BundleManifest
import com.example.qnnsample.qnndeploy.DeviceIdentity
import com.example.qnnsample.qnndeploy.FileFormat
import com.example.qnnsample.qnndeploy.MiniJson
import com.example.qnnsample.qnndeploy.NpuSource
import com.example.qnnsample.qnndeploy.OrtModels
import com.example.qnnsample.qnndeploy.Platform
import com.example.qnnsample.qnndeploy.QnnSelector
import com.example.qnnsample.qnndeploy.Reason
import com.example.qnnsample.qnndeploy.Reasons
import com.example.qnnsample.qnndeploy.RememberedFailure
import java.io.File

object Agreement {
    @JvmStatic
    fun main(args: Array<String>) {
        val input = MiniJson.parse(File(args[0]).readText()) as Map<*, *>
        val manifests = (input["manifests"] as List<*>).map { BundleManifest.from(it) }
        val cases = (input["cases"] as List<*>).map { raw ->
            val case = raw as Map<*, *>
            val device = case["device"] as Map<*, *>
            val errors = (case["load_errors"] as Map<*, *>).entries.associate { (k, v) -> k as String to v as String }
            val env = (case["adsp_before"] as String?)?.let { mapOf("ADSP_LIBRARY_PATH" to it) } ?: emptyMap()
            val host = FakeHost(errors, env, case["adsp_error"] as String?, case["runtime_version"] as String?)
            val remembered = (case["remembered"] as Map<*, *>?)?.let {
                RememberedFailure(it["app_version"] as String, it["bundle_version"] as String, it["message"] as String)
            }
            val decision = QnnSelector.decide(
                manifest = manifests[(case["manifest"] as Long).toInt()],
                device = DeviceIdentity(
                    socModel = device["soc_model"] as String?,
                    boardPlatform = device["board_platform"] as String?,
                    sdkInt = (device["sdk_int"] as Long).toInt(),
                ),
                host = host,
                libDir = case["lib_dir"] as String,
                npuFormat = FileFormat.entries.first { it.id == case["npu_format"] },
                appVersion = case["app_version"] as String,
                remembered = remembered,
                platform = (case["platform"] as Map<*, *>?)?.let {
                    Platform((it["soc_model"] as Long).toInt(), it["dsp_arch"] as String)
                },
                compilesOnnx = case["compiles_onnx"] as Boolean,
            )
            val qnnOptions = if (decision.npu) OrtModels.qnnOptions(decision, "burst") else null
            val graphOptions = if (decision.npuSource == NpuSource.ON_DEVICE) {
                decision.paths.keys.filter { it !in decision.cpuGraphs }.associateWith { graph ->
                    OrtModels.sessionOptions(decision, "burst", graph = graph).use { it.standInEpOptions ?: it.standInQnnOptions }
                }
            } else {
                null
            }
            "{\"decision\":${decision.toJson()},\"calls\":${MiniJson.write(host.calls)}," +
                "\"qnn_options\":${MiniJson.write(qnnOptions)},\"graph_options\":${MiniJson.write(graphOptions)}}"
        }
        val libraries = (input["archs"] as List<*>).map {
            val libs = QnnSelector.qnnLibraries(it as String)
            listOf(libs.backend, libs.system, libs.stub, libs.skel)
        }
        // Every function of the generated Reasons object, called by its name with its arguments in order.
        val reasons = (input["reasons"] as List<*>).map { raw ->
            val call = raw as Map<*, *>
            val args = (call["args"] as List<*>).toTypedArray()
            val method = Reasons::class.java.methods.first { it.name == call["function"] && it.parameterCount == args.size }
            val reason = method.invoke(Reasons, *args) as Reason
            listOf(reason.key, reason.text)
        }
        println(
            "{\"cases\":${cases.joinToString(",", "[", "]")},\"libraries\":${MiniJson.write(libraries)}," +
                "\"reasons\":${MiniJson.write(reasons)}}",
        )
    }
}
