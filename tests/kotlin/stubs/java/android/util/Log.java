package android.util;

import java.util.ArrayList;
import java.util.List;

/** Stand-in for android.util.Log: keeps "TAG: message" lines for JVM tests. */
public final class Log {
    public static final List<String> LINES = new ArrayList<>();

    private Log() {}

    public static int d(String tag, String msg) { LINES.add(tag + ": " + msg); return 0; }
    public static int i(String tag, String msg) { LINES.add(tag + ": " + msg); return 0; }
    public static int w(String tag, String msg) { LINES.add(tag + ": " + msg); return 0; }
    public static int w(String tag, String msg, Throwable tr) { LINES.add(tag + ": " + msg + ": " + tr); return 0; }
    public static int e(String tag, String msg) { LINES.add(tag + ": " + msg); return 0; }
    public static int e(String tag, String msg, Throwable tr) { LINES.add(tag + ": " + msg + ": " + tr); return 0; }
}
