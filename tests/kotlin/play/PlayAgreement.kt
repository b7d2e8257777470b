package qnndeploy.playtests

// The Kotlin half of the Play rules' agreement test (tests/scaffold/test_kotlin.py). Reads
//   {"plans": [play.json objects], "play": [[plan, manufacturer, model, sdk_int]], "expected": [[plan, soc]]}
// and prints {"play": [PlayRules.playGroup with the plan's default group], "expected": [PlayRules.expectedGroup]}.

import com.example.qnnplay.qnndeploy.MiniJson
import com.example.qnnplay.qnndeploy.PlayPlan
import com.example.qnnplay.qnndeploy.PlayRules
import java.io.File

object PlayAgreement {
    @JvmStatic
    fun main(args: Array<String>) {
        val input = MiniJson.parse(File(args[0]).readText()) as Map<*, *>
        val plans = (input["plans"] as List<*>).map { PlayPlan.from(it) }
        val play = (input["play"] as List<*>).map { raw ->
            val case = raw as List<*>
            val plan = plans[(case[0] as Long).toInt()]
            PlayRules.playGroup(plan.groups, case[1] as String?, case[2] as String?, (case[3] as Long).toInt(), plan.defaultGroup)
        }
        val expected = (input["expected"] as List<*>).map { raw ->
            val case = raw as List<*>
            PlayRules.expectedGroup(plans[(case[0] as Long).toInt()], case[1] as String?)
        }
        println(MiniJson.write(linkedMapOf("play" to play, "expected" to expected)))
    }
}
