"""Configuration files of the local control plane: kubeconfig, token file and scheduler configurations.

Pure: every function returns the text (or data) of one file from its inputs and does no I/O, so the
files are unit-tested without a cluster. ``perfsched_dev.devcluster.cluster`` writes them into the state
directory. Facts behind the flags and fields are in ``/work/shared/docs/control-plane.md`` and
``docs/dev-cluster.md``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import yaml

from scheduler.names import GPU_RESOURCE

#: schedulerName of the profile that calls the perfsched extender.
PERFSCHED_SCHEDULER_NAME = "perfsched"
#: schedulerName served by the second, extender-free kube-scheduler (pods that do not ask for perfsched).
DEFAULT_SCHEDULER_NAME = "default-scheduler"

ADMIN_USER = "perfsched-admin"


@dataclass(frozen=True, slots=True)
class SchedulerTuning:
    """Knobs of both kube-scheduler processes (upstream defaults unless said otherwise).

    ``qps``/``burst`` are the scheduler's API client limits (upstream default 50/100), which cap
    bindings per second; the back-off values are shortened so that tests see retries quickly.
    """

    qps: float = 50.0
    burst: int = 100
    pod_initial_backoff_s: int = 1
    pod_max_backoff_s: int = 2
    extender_weight: int = 1
    extender_timeout_s: float = 5.0
    #: False (the chart's default): kube-scheduler binds; True: the extender creates the Bindings
    #: (``bindVerb``, the chart's ``extender.bind: true``)
    extender_binds: bool = False


def kubeconfig_text(server: str, token: str, ca_pem: bytes, user: str = ADMIN_USER) -> str:
    """A kubeconfig for ``server`` that authenticates with a bearer ``token`` and trusts ``ca_pem``."""
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "perfsched-dev",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode("ascii"),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "perfsched-dev", "context": {"cluster": "perfsched-dev", "user": user}}],
        "current-context": "perfsched-dev",
    }
    return yaml.safe_dump(doc, sort_keys=False)


def token_file_text(token: str, user: str = ADMIN_USER) -> str:
    """The ``--token-auth-file`` line (``token,user,uid,"groups"``) making ``user`` a cluster admin."""
    return f'{token},{user},{user}-uid,"system:masters"\n'


def perfsched_scheduler_config(
    kubeconfig: str, extender_url: str, tuning: SchedulerTuning = SchedulerTuning()
) -> dict[str, Any]:
    """KubeSchedulerConfiguration of the kube-scheduler that serves only the ``perfsched`` profile.

    Extenders are top-level in this API: they apply to every profile of the process. The default
    profile therefore lives in a second process (``default_scheduler_config``), so pods that never
    asked for perfsched are not sent to the extender, as with perfsched installed beside a cluster's
    own scheduler. As the chart's default, kube-scheduler binds (``extender_binds`` adds ``bindVerb``);
    the extender sees node names only (``nodeCacheCapable``) and is consulted only for pods requesting
    ``nvidia.com/gpu``; NodeResourcesFit still counts the GPUs (``ignoredByScheduler: false``), so
    preemption candidates stay consistent.
    """
    config = _base_config(kubeconfig, tuning)
    config["profiles"] = [{"schedulerName": PERFSCHED_SCHEDULER_NAME}]
    config["extenders"] = [
        {
            "urlPrefix": extender_url.rstrip("/"),
            "filterVerb": "filter",
            "prioritizeVerb": "prioritize",
            "preemptVerb": "preempt",
            **({"bindVerb": "bind"} if tuning.extender_binds else {}),
            "weight": tuning.extender_weight,
            "httpTimeout": f"{tuning.extender_timeout_s:g}s",
            "nodeCacheCapable": True,
            "ignorable": False,
            "managedResources": [{"name": GPU_RESOURCE, "ignoredByScheduler": False}],
        }
    ]
    return config


def default_scheduler_config(kubeconfig: str, tuning: SchedulerTuning = SchedulerTuning()) -> dict[str, Any]:
    """KubeSchedulerConfiguration of the plain kube-scheduler (``default-scheduler``, no extender)."""
    config = _base_config(kubeconfig, tuning)
    config["profiles"] = [{"schedulerName": DEFAULT_SCHEDULER_NAME}]
    return config


def _base_config(kubeconfig: str, tuning: SchedulerTuning) -> dict[str, Any]:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig, "qps": tuning.qps, "burst": tuning.burst},
        "leaderElection": {"leaderElect": False},
        "podInitialBackoffSeconds": tuning.pod_initial_backoff_s,
        "podMaxBackoffSeconds": tuning.pod_max_backoff_s,
    }


def openssl_server_ext(hosts_ip: tuple[str, ...], hosts_dns: tuple[str, ...]) -> str:
    """The ``-extfile`` for the apiserver serving certificate (subjectAltName for every host)."""
    alt = [f"IP:{ip}" for ip in hosts_ip] + [f"DNS:{name}" for name in hosts_dns]
    return (
        "basicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        f"subjectAltName={','.join(alt)}\n"
    )


def jobset_config(webhook_port: int, health_port: int, cert_dir: str) -> str:
    """The JobSet controller's Configuration: no leader election, no certificate rotation (the dev cluster
    hands it a serving certificate), webhook and health on loopback, no metrics endpoint."""
    return yaml.safe_dump(
        {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": cert_dir},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        }
    )


def trainer_config(webhook_port: int, health_port: int) -> str:
    """The Kubeflow Trainer controller's Configuration, likewise (its certificate is found via $TMPDIR)."""
    return yaml.safe_dump(
        {
            "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "certManagement": {"enable": False},
            "webhook": {"port": webhook_port, "host": "127.0.0.1"},
            "metrics": {"bindAddress": "0"},
            "health": {
                "healthProbeBindAddress": f"127.0.0.1:{health_port}",
                "readinessEndpointName": "readyz",
                "livenessEndpointName": "healthz",
            },
        }
    )
