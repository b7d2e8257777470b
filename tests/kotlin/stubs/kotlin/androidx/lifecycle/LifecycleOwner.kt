package androidx.lifecycle

import kotlinx.coroutines.CoroutineScope

// Stand-ins: lifecycle-runtime-ktx's lifecycleScope, the coroutine scope of a LifecycleOwner, cancelled when it is
// destroyed (the real one dispatches on Dispatchers.Main.immediate), and repeatOnLifecycle, which runs a block each
// time the owner reaches a state and cancels it when the owner falls below it. As types only (no JVM test makes a
// screen).

abstract class LifecycleCoroutineScope internal constructor() : CoroutineScope

val LifecycleOwner.lifecycleScope: LifecycleCoroutineScope
    get() = throw RuntimeException("Stub!")

suspend fun LifecycleOwner.repeatOnLifecycle(state: Lifecycle.State, block: suspend CoroutineScope.() -> Unit): Unit =
    throw RuntimeException("Stub!")
