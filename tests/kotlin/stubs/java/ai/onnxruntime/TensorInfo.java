package ai.onnxruntime;

/** Stand-in: a tensor's shape, the one member of ONNX Runtime's TensorInfo the glue reads. */
public class TensorInfo {
    private final long[] shape;

    TensorInfo(long[] shape) { this.shape = shape; }

    /** A copy of the shape, as the real one gives. */
    public long[] getShape() { return shape.clone(); }
}
