package ai.onnxruntime;

/** Stand-in: the Java element types of ONNX Runtime's API (the real enum's constants, in its order). */
public enum OnnxJavaType {
    FLOAT, DOUBLE, INT8, INT16, INT32, INT64, BOOL, STRING, UINT8, FLOAT16, BFLOAT16, UNKNOWN
}
