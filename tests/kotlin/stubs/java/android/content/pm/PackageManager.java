package android.content.pm;

/** Stand-in: abstract as in android.jar, so tests can answer getPackageInfo. */
public abstract class PackageManager {
    public static class NameNotFoundException extends Exception {
        public NameNotFoundException(String name) { super(name); }
    }

    @Deprecated
    public abstract PackageInfo getPackageInfo(String packageName, int flags) throws NameNotFoundException;
}
