package ai.onnxruntime;

/** Stand-in: a tensor's shape and Java element type, the members of ONNX Runtime's TensorInfo the glue reads. */
public class TensorInfo {
    /** The Java type of this tensor (a public field, as in the real class). */
    public final OnnxJavaType type;

    private final long[] shape;

    TensorInfo(long[] shape, OnnxJavaType type) {
        this.shape = shape;
        this.type = type;
    }

    /** A copy of the shape, as the real one gives. */
    public long[] getShape() { return shape.clone(); }
}
