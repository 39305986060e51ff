"""Workload emulator (shell): plays the training processes of TrainingJob pods on KWOK nodes."""
