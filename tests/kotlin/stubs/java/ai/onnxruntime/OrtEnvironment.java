package ai.onnxruntime;

/**
 * Stand-in: one environment; createSession opens a stand-in session (no model is read) that OrtSession counts.
 * A JVM test may set STAND_IN_CREATE (not in ONNX Runtime's API) to stand in for the session creation itself: it is
 * called with the model path and the options before the session is made, and may block, throw or write files (an
 * on-device compile writes the EP context file that ep.context_file_path names).
 */
public final class OrtEnvironment implements AutoCloseable {
    private static final OrtEnvironment ENVIRONMENT = new OrtEnvironment();

    /** Stand-in only: what creating a session does besides making one; null: nothing. */
    public static volatile StandInCreate STAND_IN_CREATE;

    /** Stand-in only: the session creation a JVM test stands in for. */
    public interface StandInCreate {
        void create(String modelPath, OrtSession.SessionOptions options) throws OrtException;
    }

    private OrtEnvironment() {}

    public static OrtEnvironment getEnvironment() { return ENVIRONMENT; }

    public OrtSession createSession(String modelPath, OrtSession.SessionOptions options) throws OrtException {
        StandInCreate create = STAND_IN_CREATE;
        if (create != null) create.create(modelPath, options);
        return new OrtSession();
    }

    @Override
    public void close() { throw new RuntimeException("Stub!"); }
}
