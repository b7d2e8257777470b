package ai.onnxruntime;

import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.nio.LongBuffer;

/** Stand-in: createTensor makes a tensor that holds nothing (the stand-in sessions read no input). */
public class OnnxTensor extends OnnxTensorLike {
    OnnxTensor() {}

    public static OnnxTensor createTensor(OrtEnvironment env, FloatBuffer data, long[] shape) throws OrtException {
        return new OnnxTensor();
    }

    public static OnnxTensor createTensor(OrtEnvironment env, IntBuffer data, long[] shape) throws OrtException {
        return new OnnxTensor();
    }

    public static OnnxTensor createTensor(OrtEnvironment env, LongBuffer data, long[] shape) throws OrtException {
        return new OnnxTensor();
    }

    @Override
    public void close() {}
}
