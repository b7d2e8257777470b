"""Floor 4: the on-device decision, NPU or CPU (decision.py, the twin of the Kotlin selector), and the phones a
bundle reaches by it (reach.py): rules over a manifest, kept apart from the file kinds in formats/ they read."""
