package androidx.activity

import androidx.lifecycle.ViewModel

// Stand-in: activity-ktx's viewModels(), the ViewModel of a ComponentActivity that outlives its rotations; as types
// only (no JVM test makes a screen). The real one also takes extrasProducer and factoryProducer, both defaulting to null.

inline fun <reified VM : ViewModel> ComponentActivity.viewModels(): Lazy<VM> = lazy { throw RuntimeException("Stub!") }
