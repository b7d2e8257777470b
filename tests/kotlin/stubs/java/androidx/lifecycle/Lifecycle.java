package androidx.lifecycle;

/** Stand-in: androidx.lifecycle's Lifecycle, only as the type LifecycleOwner returns. */
public abstract class Lifecycle {
}
