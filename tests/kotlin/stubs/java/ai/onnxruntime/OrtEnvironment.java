package ai.onnxruntime;

/**
 * Stand-in: one environment; createSession opens a stand-in session (no model is read) that OrtSession counts.
 * A JVM test may set STAND_IN_CREATE (not in ONNX Runtime's API) to stand in for the session creation itself: it is
 * called with the model path and the options before the session is made, and may block, throw or write files (an
 * on-device compile writes the EP context file that ep.context_file_path names).
 *
 * The plugin-EP API (registerExecutionProviderLibrary, getEpDevices; real signatures from ONNX Runtime's
 * java/src/main/java/ai/onnxruntime/OrtEnvironment.java, read 2026-12-05 in onnxruntime/onnxruntime-qnn at
 * cee6c0d91e583d43f5ecef6391e93c19b4042c0f; added by microsoft/onnxruntime PR #25131, ONNX Runtime 1.23.0) is stood in
 * as a registry (stand-in behaviour): registering a library known to STAND_IN_PLUGINS records the registration in
 * STAND_IN_REGISTERED and makes getEpDevices list one device of the EP that library offers; an unknown library
 * throws, as the real call does when it cannot load the file, and so does a second registration under one name
 * ("already registered", as Qualcomm's Android test notes).
 */
public final class OrtEnvironment implements AutoCloseable {
    private static final OrtEnvironment ENVIRONMENT = new OrtEnvironment();

    /** Stand-in only: what creating a session does besides making one; null: nothing. */
    public static volatile StandInCreate STAND_IN_CREATE;

    /** Stand-in only: the session creation a JVM test stands in for. */
    public interface StandInCreate {
        void create(String modelPath, OrtSession.SessionOptions options) throws OrtException;
    }

    /**
     * Stand-in only: library path -> the EP name of the devices it offers once registered. The default is what
     * Qualcomm's QNN plugin AAR ships (ai.onnxruntime.qnnpluginep's getLibraryPath() and getEpName(),
     * onnxruntime/onnxruntime-qnn java/src/main/qnnpluginep/.../QnnPluginEpLibrary.kt at 7f38fb6c155582549954f7a419c84677d04fd87b).
     */
    public static final java.util.Map<String, String> STAND_IN_PLUGINS = new java.util.LinkedHashMap<>(
            java.util.Map.of("libonnxruntime_providers_qnn.so", "QNNExecutionProvider"));

    /** Stand-in only: registration name -> library path, in the order registered. */
    public static final java.util.Map<String, String> STAND_IN_REGISTERED =
            java.util.Collections.synchronizedMap(new java.util.LinkedHashMap<>());

    private OrtEnvironment() {}

    public void registerExecutionProviderLibrary(String registrationName, String libraryPath) throws OrtException {
        if (!STAND_IN_PLUGINS.containsKey(libraryPath)) {
            throw new OrtException("stand-in: cannot load execution provider library " + libraryPath);
        }
        if (STAND_IN_REGISTERED.containsKey(registrationName)) {
            throw new OrtException("stand-in: library " + registrationName + " is already registered");
        }
        STAND_IN_REGISTERED.put(registrationName, libraryPath);
    }

    public java.util.List<OrtEpDevice> getEpDevices() throws OrtException {
        java.util.List<OrtEpDevice> devices = new java.util.ArrayList<>();
        synchronized (STAND_IN_REGISTERED) {
            for (String library : STAND_IN_REGISTERED.values()) devices.add(new OrtEpDevice(STAND_IN_PLUGINS.get(library)));
        }
        return java.util.Collections.unmodifiableList(devices);
    }

    public static OrtEnvironment getEnvironment() { return ENVIRONMENT; }

    public OrtSession createSession(String modelPath, OrtSession.SessionOptions options) throws OrtException {
        StandInCreate create = STAND_IN_CREATE;
        if (create != null) create.create(modelPath, options);
        return new OrtSession(modelPath);
    }

    @Override
    public void close() { throw new RuntimeException("Stub!"); }
}
