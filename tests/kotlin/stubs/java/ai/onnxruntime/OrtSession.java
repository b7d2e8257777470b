package ai.onnxruntime;

import java.util.Iterator;
import java.util.Map;

public class OrtSession implements AutoCloseable {
    public Result run(Map<String, ? extends OnnxTensorLike> inputs) throws OrtException {
        throw new RuntimeException("Stub!");
    }

    @Override
    public void close() throws OrtException { throw new RuntimeException("Stub!"); }

    public static class SessionOptions implements AutoCloseable {
        public SessionOptions() { throw new RuntimeException("Stub!"); }

        public void addConfigEntry(String configKey, String configValue) throws OrtException {
            throw new RuntimeException("Stub!");
        }

        public void addQnn(Map<String, String> providerOptions) throws OrtException {
            throw new RuntimeException("Stub!");
        }

        @Override
        public void close() { throw new RuntimeException("Stub!"); }
    }

    public static class Result implements AutoCloseable, Iterable<Map.Entry<String, OnnxValue>> {
        @Override
        public Iterator<Map.Entry<String, OnnxValue>> iterator() { throw new RuntimeException("Stub!"); }

        @Override
        public void close() { throw new RuntimeException("Stub!"); }
    }
}
