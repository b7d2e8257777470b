package ai.onnxruntime;

public class OrtException extends Exception {
    public OrtException(String message) { super(message); }
}
