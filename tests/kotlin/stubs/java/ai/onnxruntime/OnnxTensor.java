package ai.onnxruntime;

import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.nio.LongBuffer;

public class OnnxTensor extends OnnxTensorLike {
    public static OnnxTensor createTensor(OrtEnvironment env, FloatBuffer data, long[] shape) throws OrtException {
        throw new RuntimeException("Stub!");
    }

    public static OnnxTensor createTensor(OrtEnvironment env, IntBuffer data, long[] shape) throws OrtException {
        throw new RuntimeException("Stub!");
    }

    public static OnnxTensor createTensor(OrtEnvironment env, LongBuffer data, long[] shape) throws OrtException {
        throw new RuntimeException("Stub!");
    }

    @Override
    public void close() { throw new RuntimeException("Stub!"); }
}
