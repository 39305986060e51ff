"""Kubernetes adapter: the only code that talks to the API (codec, CRD models, cache, actuator)."""
