package ai.onnxruntime;

/**
 * A tuple of an execution provider and a hardware device, as ONNX Runtime's Java API has it (final class, created by
 * OrtEnvironment.getEpDevices only; added by microsoft/onnxruntime PR #25131, ONNX Runtime 1.23: see
 * qnndeploy/data/runtime.json, aars.qualcomm.registers). Only getEpName, the member the glue uses, is here.
 * Stand-in: made from the EP name alone (the real one reads it from a native handle).
 */
public final class OrtEpDevice {
    private final String epName;

    /** Stand-in only (the real constructor takes a native handle): a device of the EP named epName. */
    OrtEpDevice(String epName) { this.epName = epName; }

    public String getEpName() { return epName; }
}
