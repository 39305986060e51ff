"""perfsched: a Kubernetes scheduler for deep-learning training jobs driven by performance models."""

__version__ = "0.1.0"
