package ai.onnxruntime;

import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Stand-in: sessions count themselves (OPENED, CLOSED) so JVM tests see how many the app opens and closes. A JVM
 * test may give them a model (STAND_IN_MODEL, not in ONNX Runtime's API): it names a session's inputs and computes
 * its outputs from the model path the session was created with and the tensors it is fed.
 */
public class OrtSession implements AutoCloseable {
    public static final AtomicInteger OPENED = new AtomicInteger();
    public static final AtomicInteger CLOSED = new AtomicInteger();

    /** Stand-in only: the model every session runs; null: sessions that read no input and return an empty result. */
    public static volatile StandInModel STAND_IN_MODEL;

    /** Stand-in only: what a model file computes, a JVM test's deterministic function of the inputs. */
    public interface StandInModel {
        Set<String> inputNames(String modelPath);

        Map<String, OnnxTensor> run(String modelPath, Map<String, ? extends OnnxTensorLike> inputs) throws OrtException;
    }

    private final String modelPath;

    OrtSession(String modelPath) {
        this.modelPath = modelPath;
        OPENED.incrementAndGet();
    }

    /** Stand-in only (not in ONNX Runtime's API): what a run does besides returning an empty result; null: nothing. */
    public static volatile StandInRun STAND_IN_RUN;

    /** Stand-in only: the inference a JVM test stands in for; it may block or throw. */
    public interface StandInRun {
        void run() throws OrtException;
    }

    /** Stand-in: STAND_IN_RUN, if set, then STAND_IN_MODEL's outputs, or an empty result without one. */
    public Result run(Map<String, ? extends OnnxTensorLike> inputs) throws OrtException {
        StandInRun run = STAND_IN_RUN;
        if (run != null) run.run();
        StandInModel model = STAND_IN_MODEL;
        return new Result(model == null ? Map.of() : model.run(modelPath, inputs));
    }

    /** Stand-in: STAND_IN_MODEL's input names for this session's model. */
    public Set<String> getInputNames() throws OrtException {
        StandInModel model = STAND_IN_MODEL;
        if (model == null) throw new RuntimeException("Stub!");
        return model.inputNames(modelPath);
    }

    @Override
    public void close() throws OrtException { CLOSED.incrementAndGet(); }

    /**
     * Stand-in: options that accept everything, and keep what addQnn, addExecutionProvider and addConfigEntry were
     * given for the JVM tests.
     */
    public static class SessionOptions implements AutoCloseable {
        /** Stand-in only (not in ONNX Runtime's API): the provider options of the last addQnn call, or null. */
        public Map<String, String> standInQnnOptions;

        /** Stand-in only (not in ONNX Runtime's API): the session config entries, in the order they were added. */
        public final Map<String, String> standInConfig = new java.util.LinkedHashMap<>();

        public SessionOptions() {}

        public void addConfigEntry(String configKey, String configValue) throws OrtException {
            standInConfig.put(configKey, configValue);
        }

        public void addQnn(Map<String, String> providerOptions) throws OrtException {
            standInQnnOptions = new java.util.LinkedHashMap<>(providerOptions);
        }

        /** Stand-in only (not in ONNX Runtime's API): the devices and provider options of the last addExecutionProvider call. */
        public java.util.List<OrtEpDevice> standInEpDevices;
        public Map<String, String> standInEpOptions;

        /**
         * The plugin-EP form (real signature: ONNX Runtime's OrtSession.java, microsoft/onnxruntime PR #25131); like
         * the real one, an empty device list is an IllegalArgumentException. Stand-in: keeps what it was given.
         */
        public void addExecutionProvider(java.util.List<OrtEpDevice> devices, Map<String, String> providerOptions)
                throws OrtException {
            if (devices.isEmpty()) throw new IllegalArgumentException("Must supply at least one OrtEpDevice");
            standInEpDevices = new java.util.ArrayList<>(devices);
            standInEpOptions = new java.util.LinkedHashMap<>(providerOptions);
        }

        @Override
        public void close() {}
    }

    /** The outputs of a run by name, in the model's order; closing it closes them, as the real one does. */
    public static class Result implements AutoCloseable, Iterable<Map.Entry<String, OnnxValue>> {
        private final Map<String, OnnxValue> values;

        Result(Map<String, ? extends OnnxValue> values) { this.values = new LinkedHashMap<>(values); }

        public Optional<OnnxValue> get(String key) { return Optional.ofNullable(values.get(key)); }

        public int size() { return values.size(); }

        @Override
        public Iterator<Map.Entry<String, OnnxValue>> iterator() { return values.entrySet().iterator(); }

        @Override
        public void close() {
            for (OnnxValue value : values.values()) value.close();
        }
    }
}
