"""The one kubeconfig loader: an ``ApiClient`` from a kubeconfig file or the pod's service account.

Impure adapter (reads files and the environment). Every component uses ``api_client``: the extender,
the operator, the workload emulator, the worker's progress reporter, the demo and the dev cluster. A
kubeconfig that cannot be loaded, or no configuration at all, is a ``ConfigError`` naming the file.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from scheduler.core.errors import ConfigError

#: Connections kept per host: the extender's and the operator's watches hold one each while binds and
#: writes run concurrently from thread pools; the client's default (5 per CPU) is small on small nodes.
POOL_MAXSIZE = 32


def api_client(kubeconfig: str | Path | None = None) -> k8s.ApiClient:
    """An API client for ``kubeconfig``'s current context.

    Without ``kubeconfig``: ``$KUBECONFIG``, else the in-cluster service account (inside a pod), else
    ``~/.kube/config``. Raises ``ConfigError`` when the chosen configuration cannot be loaded, or there is
    none.
    """
    path = str(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG", "")
    cfg = k8s.Configuration()
    cfg.connection_pool_maxsize = max(POOL_MAXSIZE, cfg.connection_pool_maxsize or 0)
    in_cluster = not path and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if not path and not in_cluster:
        path = os.path.expanduser("~/.kube/config")
        if not os.path.exists(path):
            raise ConfigError("no kubeconfig: set KUBECONFIG or --kubeconfig, or run inside a cluster")
    try:
        if in_cluster:
            k8s_config.load_incluster_config(client_configuration=cfg)
            return k8s.ApiClient(cfg)
        return k8s_config.new_client_from_config(config_file=path, client_configuration=cfg)
    except (k8s_config.ConfigException, OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot load kubeconfig {path or '(in-cluster)'}: {exc}") from None
