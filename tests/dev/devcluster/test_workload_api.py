"""The dev cluster's gang API switches: the feature gates and runtime config its control plane gets."""

from __future__ import annotations

import pytest

from perfsched_dev.devcluster.cluster import ClusterState, DevCluster, feature_gates


@pytest.mark.parametrize(
    ("workload_api", "batching", "gates"),
    [
        (False, True, ""),
        (True, True, "GenericWorkload=true"),
        (True, False, "GenericWorkload=true,OpportunisticBatching=false"),
        (False, False, "OpportunisticBatching=false"),
    ],
)
def test_feature_gates(workload_api: bool, batching: bool, gates: str) -> None:
    assert feature_gates(workload_api, batching) == gates


def state(gates: str) -> ClusterState:
    return ClusterState(
        state_dir="/s", kubeconfig="/s/kubeconfig", phase="running", started_at=0.0, feature_gates=gates
    )


def test_the_apiserver_serves_the_gang_api_only_with_the_gate() -> None:
    on = state(feature_gates(True, True))
    assert DevCluster._gate_args(on, apiserver=True) == [
        "--feature-gates=GenericWorkload=true",
        "--runtime-config=scheduling.k8s.io/v1beta1=true",
    ]
    assert DevCluster._gate_args(on, apiserver=False) == ["--feature-gates=GenericWorkload=true"]
    off = state(feature_gates(False, False))
    assert DevCluster._gate_args(off, apiserver=True) == ["--feature-gates=OpportunisticBatching=false"]
    assert DevCluster._gate_args(state(""), apiserver=True) == []


def test_the_gates_survive_a_state_round_trip() -> None:
    """``restart`` and ``start_scheduler`` respawn kube-scheduler from the stored state: same gates."""
    s = state(feature_gates(True, False))
    assert (
        ClusterState.from_json(s.to_json()).feature_gates
        == "GenericWorkload=true,OpportunisticBatching=false"
    )
    legacy = s.to_json()
    del legacy["feature_gates"]
    assert ClusterState.from_json(legacy).feature_gates == ""
