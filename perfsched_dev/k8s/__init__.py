"""Kubernetes API clients of the developer tooling: fake GPU nodes for KWOK and namespaces
(``bootstrap``), the demo's calls (``demoapi``) and the exec emulator's (``execapi``). The only modules of
``perfsched_dev`` that import ``kubernetes``; everything else reaches the API through them or
``scheduler.k8s``."""
