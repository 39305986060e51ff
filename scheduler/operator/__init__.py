"""Operator (shell): TrainingJob lifecycle loop that admits, orders, starts, resizes and preempts jobs."""
