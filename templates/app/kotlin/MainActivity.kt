package com.example.qnnsample

import android.os.Bundle
import android.widget.Button
import android.widget.LinearLayout
import android.widget.ScrollView
import android.widget.TextView
import androidx.activity.ComponentActivity
import androidx.activity.viewModels
import androidx.lifecycle.Lifecycle
import androidx.lifecycle.lifecycleScope
import androidx.lifecycle.repeatOnLifecycle
import com.example.qnnsample.qnndeploy.GenerationSession
import kotlinx.coroutines.launch

/**
 * One screen: the phone's SoC, the NPU-or-CPU decision with its reason, and a timed inference on the chosen one (a
 * generation, for a bundle with one).
 * It only shows SampleViewModel's state and passes the button's taps on; the work and the models live there.
 */
class MainActivity : ComponentActivity() {
    private val model: SampleViewModel by viewModels()

    override fun onCreate(savedInstanceState: Bundle?) {
        super.onCreate(savedInstanceState)
        val status = TextView(this)
        status.setPadding(32, 32, 32, 32)
        val runButton = Button(this)
        runButton.text = if (GenerationSession.BUNDLE != null) "Generate" else "Run a timed inference"
        runButton.setOnClickListener { model.runTimed() }
        val column = LinearLayout(this)
        column.orientation = LinearLayout.VERTICAL
        column.addView(runButton)
        column.addView(status)
        val scroll = ScrollView(this)
        scroll.addView(column)
        setContentView(scroll)

        // While the screen is started: a new screen (after a rotation) shows the current state at once.
        lifecycleScope.launch {
            repeatOnLifecycle(Lifecycle.State.STARTED) {
                model.state.collect { state ->
                    status.text = state.status
                    runButton.isEnabled = state.canRun
                }
            }
        }
    }
}
