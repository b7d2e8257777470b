package ai.onnxruntime;

import java.util.Iterator;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;

/** Stand-in: sessions count themselves (OPENED, CLOSED) so JVM tests see how many the app opens and closes. */
public class OrtSession implements AutoCloseable {
    public static final AtomicInteger OPENED = new AtomicInteger();
    public static final AtomicInteger CLOSED = new AtomicInteger();

    OrtSession() { OPENED.incrementAndGet(); }

    /** Stand-in only (not in ONNX Runtime's API): what a run does besides returning an empty result; null: nothing. */
    public static volatile StandInRun STAND_IN_RUN;

    /** Stand-in only: the inference a JVM test stands in for; it may block or throw. */
    public interface StandInRun {
        void run() throws OrtException;
    }

    /** Stand-in: no model runs; STAND_IN_RUN, if set, then an empty result. */
    public Result run(Map<String, ? extends OnnxTensorLike> inputs) throws OrtException {
        StandInRun run = STAND_IN_RUN;
        if (run != null) run.run();
        return new Result();
    }

    public java.util.Set<String> getInputNames() throws OrtException { throw new RuntimeException("Stub!"); }

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

    public static class Result implements AutoCloseable, Iterable<Map.Entry<String, OnnxValue>> {
        Result() {}

        @Override
        public Iterator<Map.Entry<String, OnnxValue>> iterator() { throw new RuntimeException("Stub!"); }

        /** Stand-in: nothing to free. */
        @Override
        public void close() {}
    }
}
