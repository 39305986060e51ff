"""Scheduling policies (pure) and their registry by name."""
