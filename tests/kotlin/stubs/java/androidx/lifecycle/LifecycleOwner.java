package androidx.lifecycle;

/** Stand-in: androidx.lifecycle's LifecycleOwner (its Kotlin property lifecycle is getLifecycle() on the JVM). */
public interface LifecycleOwner {
    Lifecycle getLifecycle();
}
