package qnndeploy.tests

// The generation a scaffolded glue carries as data (Generated.GENERATION, rendered from templates/glue/Generated.kt.j2
// for the package com.example.gen) is the one the glue parses from the same manifest at run time. tests/scaffold/
// test_kotlin.py renders that glue from a manifest whose generation has names that need escaping, and runs:
//   qnndeploy.tests.GeneratedGeneration MANIFEST_JSON

import com.example.gen.qnndeploy.BundleManifest
import com.example.gen.qnndeploy.Generated
import java.io.File

object GeneratedGeneration {
    @JvmStatic
    fun main(args: Array<String>) {
        val parsed = BundleManifest.parse(File(args[0]).readText()).generation
        val generated = Generated.GENERATION
        if (parsed != null && parsed == generated) {
            println("ok the generated GENERATION is the manifest's generation")
        } else {
            println("FAIL the generated GENERATION differs:\n$generated\nthe manifest's:\n$parsed")
            kotlin.system.exitProcess(1)
        }
    }
}
