"""Workload emulator (shell): plays the training processes of TrainingJob pods on KWOK nodes from the
throughput table (``table_driven``, progress kept by the pure ``accounting``) or runs them as real local
processes on exec nodes (``exec``)."""
