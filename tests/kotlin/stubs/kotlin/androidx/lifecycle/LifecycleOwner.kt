package androidx.lifecycle

import kotlinx.coroutines.CoroutineScope

// Stand-in: lifecycle-runtime-ktx's lifecycleScope, the coroutine scope of a LifecycleOwner, cancelled when it is
// destroyed (the real one dispatches on Dispatchers.Main.immediate).

abstract class LifecycleCoroutineScope internal constructor() : CoroutineScope

val LifecycleOwner.lifecycleScope: LifecycleCoroutineScope
    get() = throw RuntimeException("Stub!")
