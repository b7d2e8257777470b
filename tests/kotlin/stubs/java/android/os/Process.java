package android.os;

/** Stand-in for android.os.Process: myPid() is the JVM's own pid, so JVM tests see a real process. */
public class Process {
    public static final int myPid() {
        return (int) ProcessHandle.current().pid();
    }
}
