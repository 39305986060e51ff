"""Trace-driven simulator (shell): replays traces through the same policy and placement code."""
