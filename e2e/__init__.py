"""End-to-end tests against a real local control plane (see e2e/conftest.py and docs/dev-cluster.md)."""
