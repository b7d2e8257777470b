"""qnndeploy: ship ONNX models on the Qualcomm NPU, one checked step at a time."""

__version__ = "0.1.0"
