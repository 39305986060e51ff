"""perfsched's developer tooling, beside the product (``scheduler``, ``perfmodel``); not in the image.

- ``devcluster``: the local Kubernetes control plane (etcd, kube-apiserver, kube-scheduler, KWOK);
- ``emulator``: the workload emulator, table-driven on KWOK nodes or running real processes (``--exec``);
- ``demo``: ``perfsched demo`` (emulated) and ``perfsched demo --real``;
- ``k8s``: their API clients (KWOK node bootstrap, the demo's and the exec emulator's calls);
- ``commands``: the ``perfsched dev-cluster | demo | emulate`` commands, registered on the product's CLI
  through the ``perfsched.commands`` entry points in pyproject.toml.

perfsched_dev imports the product; the product never imports perfsched_dev (an import-linter contract).
"""
