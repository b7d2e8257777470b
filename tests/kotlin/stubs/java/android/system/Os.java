package android.system;

import java.util.HashMap;
import java.util.Map;

/** Stand-in for android.system.Os: a process environment in a map, so JVM tests see what the glue sets. */
public final class Os {
    public static final Map<String, String> ENV = new HashMap<>();

    private Os() {}

    public static String getenv(String name) {
        return ENV.get(name);
    }

    public static void setenv(String name, String value, boolean overwrite) throws ErrnoException {
        if (overwrite || !ENV.containsKey(name)) ENV.put(name, value);
    }
}
