package qnndeploy.testsupport

import kotlin.system.exitProcess

/** Runs named tests, printing "ok NAME" or "FAIL NAME: error" for each (the Python side counts the ok lines), and
 * exits 1 when any failed. */
fun runTests(tests: List<Pair<String, () -> Unit>>): Nothing {
    var failed = 0
    for ((name, test) in tests) {
        try {
            test()
            println("ok $name")
        } catch (e: Throwable) {
            failed++
            println("FAIL $name: $e")
        }
    }
    exitProcess(if (failed == 0) 0 else 1)
}
