package ai.onnxruntime;

public final class OrtEnvironment implements AutoCloseable {
    public static OrtEnvironment getEnvironment() { throw new RuntimeException("Stub!"); }

    public OrtSession createSession(String modelPath, OrtSession.SessionOptions options) throws OrtException {
        throw new RuntimeException("Stub!");
    }

    @Override
    public void close() { throw new RuntimeException("Stub!"); }
}
