package androidx.lifecycle;

/** Stand-in: androidx.lifecycle's Lifecycle, as the type LifecycleOwner returns, and its states. */
public abstract class Lifecycle {
    public enum State { DESTROYED, INITIALIZED, CREATED, STARTED, RESUMED }
}
