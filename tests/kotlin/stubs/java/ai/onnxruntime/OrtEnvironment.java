package ai.onnxruntime;

/** Stand-in: one environment; createSession opens a stand-in session (no model is read) that OrtSession counts. */
public final class OrtEnvironment implements AutoCloseable {
    private static final OrtEnvironment ENVIRONMENT = new OrtEnvironment();

    private OrtEnvironment() {}

    public static OrtEnvironment getEnvironment() { return ENVIRONMENT; }

    public OrtSession createSession(String modelPath, OrtSession.SessionOptions options) throws OrtException {
        return new OrtSession();
    }

    @Override
    public void close() { throw new RuntimeException("Stub!"); }
}
