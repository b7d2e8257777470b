"""Floor 2: the QNN stack on the host: HTP partitioning, libQnnSystem, the emulator, toolchains, AI Hub."""
