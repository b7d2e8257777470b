package android.os;

/** Stand-in for android.os.Build: the fields are settable so JVM tests can play a given phone. */
public class Build {
    public static String SOC_MANUFACTURER = "unknown";
    public static String SOC_MODEL = "unknown";

    public static class VERSION {
        public static int SDK_INT = 35;
    }

    public static class VERSION_CODES {
        public static final int P = 28;
        public static final int S = 31;
    }
}
