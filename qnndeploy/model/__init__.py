"""Floor 1: ONNX models as data: reading graphs without weights, shapes, samples, metrics."""
