package ai.onnxruntime;

import java.nio.Buffer;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.nio.LongBuffer;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Stand-in: createTensor keeps a copy of the data and the shape (as the real one copies a buffer that is not direct),
 * and getFloatBuffer / getIntBuffer / getLongBuffer give a copy back, or null for another element type, as the real
 * ones do. OPEN (not in ONNX Runtime's API) counts the tensors made and not yet closed, so a JVM test sees a leak.
 */
public class OnnxTensor extends OnnxTensorLike {
    /** Stand-in only: tensors created and not closed. */
    public static final AtomicInteger OPEN = new AtomicInteger();

    private final Buffer data;
    private final TensorInfo info;
    private boolean closed;

    OnnxTensor(Buffer data, long[] shape) {
        this.data = data;
        this.info = new TensorInfo(shape);
        OPEN.incrementAndGet();
    }

    public static OnnxTensor createTensor(OrtEnvironment env, FloatBuffer data, long[] shape) throws OrtException {
        FloatBuffer copy = FloatBuffer.allocate(data.remaining());
        copy.put(data.duplicate()).flip();
        return new OnnxTensor(copy, shape.clone());
    }

    public static OnnxTensor createTensor(OrtEnvironment env, IntBuffer data, long[] shape) throws OrtException {
        IntBuffer copy = IntBuffer.allocate(data.remaining());
        copy.put(data.duplicate()).flip();
        return new OnnxTensor(copy, shape.clone());
    }

    public static OnnxTensor createTensor(OrtEnvironment env, LongBuffer data, long[] shape) throws OrtException {
        LongBuffer copy = LongBuffer.allocate(data.remaining());
        copy.put(data.duplicate()).flip();
        return new OnnxTensor(copy, shape.clone());
    }

    public TensorInfo getInfo() { return info; }

    public FloatBuffer getFloatBuffer() {
        return data instanceof FloatBuffer ? FloatBuffer.allocate(data.capacity()).put(((FloatBuffer) data).duplicate()).flip() : null;
    }

    public IntBuffer getIntBuffer() {
        return data instanceof IntBuffer ? IntBuffer.allocate(data.capacity()).put(((IntBuffer) data).duplicate()).flip() : null;
    }

    public LongBuffer getLongBuffer() {
        return data instanceof LongBuffer ? LongBuffer.allocate(data.capacity()).put(((LongBuffer) data).duplicate()).flip() : null;
    }

    @Override
    public void close() {
        if (!closed) {
            closed = true;
            OPEN.decrementAndGet();
        }
    }
}
