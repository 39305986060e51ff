"""Per-node fit: reasons a person can act on, and which of them waiting cannot fix."""

from __future__ import annotations

import pytest

from scheduler.core.node_fit import check_job_node, check_node
from tests.builders import job, node

V100_8 = node("n1").gpus(8, "V100").build()


@pytest.mark.parametrize(
    ("n", "free", "gpr", "gpu_type", "allowed", "text", "resolvable"),
    [
        (V100_8, 2, 4, "V100", (), "needs 4 nvidia.com/gpu of type V100, node has 2 free", True),
        (V100_8, 8, 4, "A100", (), "needs GPU type A100", False),
        (V100_8, 8, 4, None, ("A100",), "allows GPU types A100, node has V100", False),
        (V100_8, 8, 16, None, (), "needs 16 nvidia.com/gpu per replica, node has only 8 in total", False),
        (node("n2").gpus(8).cordoned().build(), 8, 1, None, (), "cordoned", True),
        (node("n3").gpus(0).build(), 0, 1, None, (), "has no nvidia.com/gpu", False),
    ],
)
def test_reasons(n, free, gpr, gpu_type, allowed, text, resolvable) -> None:  # type: ignore[no-untyped-def]
    res = check_node(n, free, gpus_per_replica=gpr, gpu_type=gpu_type, allowed_gpu_types=allowed)
    assert res is not None and text in res.reason and res.resolvable is resolvable
    assert res.reason.startswith("perfsched: ")


def test_fits() -> None:
    assert check_node(V100_8, 4, gpus_per_replica=4, gpu_type="V100") is None
    j = job("j").gpus_per_replica(2).allowed("V100", "A100").build()
    assert check_job_node(j, V100_8, 2) is None
