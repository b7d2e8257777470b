package ai.onnxruntime;

import java.nio.Buffer;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.nio.LongBuffer;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Stand-in: createTensor keeps a copy of the data and the shape (as the real one copies a buffer that is not direct;
 * a ByteBuffer of FLOAT elements is read in its own byte order), getFloatBuffer / getIntBuffer / getLongBuffer give
 * a copy back, or null for another element type, and getByteBuffer a copy of the bytes (native order), as the real
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
        OnnxJavaType type = data instanceof FloatBuffer ? OnnxJavaType.FLOAT : data instanceof IntBuffer
            ? OnnxJavaType.INT32 : data instanceof LongBuffer ? OnnxJavaType.INT64 : OnnxJavaType.UINT8;
        this.info = new TensorInfo(shape, type);
        OPEN.incrementAndGet();
    }

    /** Stand-in: FLOAT (from its bytes) and UINT8 only, the types the glue makes from bytes. */
    public static OnnxTensor createTensor(OrtEnvironment env, ByteBuffer data, long[] shape, OnnxJavaType type)
            throws OrtException {
        if (type == OnnxJavaType.FLOAT) {
            FloatBuffer floats = data.duplicate().order(data.order()).asFloatBuffer();
            return createTensor(env, floats, shape);
        }
        if (type != OnnxJavaType.UINT8) throw new OrtException("stand-in: createTensor from bytes of " + type);
        ByteBuffer copy = ByteBuffer.allocate(data.remaining());
        copy.put(data.duplicate()).flip();
        return new OnnxTensor(copy, shape.clone());
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

    public ByteBuffer getByteBuffer() {
        ByteBuffer out = ByteBuffer.allocate(data.capacity() * (data instanceof ByteBuffer ? 1 : data instanceof LongBuffer ? 8 : 4))
            .order(ByteOrder.nativeOrder());
        if (data instanceof FloatBuffer) out.asFloatBuffer().put(((FloatBuffer) data).duplicate());
        else if (data instanceof IntBuffer) out.asIntBuffer().put(((IntBuffer) data).duplicate());
        else if (data instanceof LongBuffer) out.asLongBuffer().put(((LongBuffer) data).duplicate());
        else out.put(((ByteBuffer) data).duplicate()).flip();
        return out;
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
