"""``heterogeneity: ordered``: a fixed type preference (newest first, or the admin's ``type_order``), then
most free GPUs; and its bad input, one line naming the field and the entry."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.core.errors import ConfigError
from scheduler.core.round import run_round
from scheduler.policies import make_policy, make_policy_from_spec
from scheduler.policies.base import FreeByType, type_infos
from scheduler.policies.ordered import (
    TypePreference,
    check_policy_type_order,
    peak_tflops,
    unknown_type_order_entries,
)
from tests.builders import FakeOracle, alloc, cluster, job, snapshot, with_

ORDERING = ["fifo", "las", "srsf", "ftf"]


def placed(result) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {a.job: a.after.gpu_type for a in result.actions if a.after is not None}


# peak dense TFLOP/s in the catalogue (perfmodel.gpus), the numbers the default order sorts by:
#   fp32: K80 4.37 < T4 8.1 < P100 9.3 < V100 15.7 < A100 19.5 < H100 67.0
#   amp:  K80 4.37 < P100 18.7 < T4 65 < V100 125 < A100 312 < H100 989.4
PEAKS = [
    ("K80", "fp32", 4.37),
    ("T4", "fp32", 8.1),
    ("T4", "amp", 65.0),
    ("P100", "amp", 18.7),
    ("H100", "fp32", 67.0),
    ("NVIDIA-H100-80GB-HBM3", "fp32", 67.0),  # a product label: the catalogue's H100
    ("MysteryGPU", "fp32", 0.0),  # unknown to the catalogue: sorts last
]  # fmt: skip


@pytest.mark.parametrize(("gpu_type", "precision", "tflops"), PEAKS)
def test_peak_rate_at_the_jobs_precision(gpu_type: str, precision: str, tflops: float) -> None:
    assert peak_tflops(gpu_type, precision) == pytest.approx(tflops)


# free GPUs: K80 8, T4 4 (one of two 4-GPU nodes busy), P100 4, V100 2
NODES = cluster(("K80", 2, 4), ("T4", 2, 4), ("P100", 1, 4), ("V100", 1, 2))
BUSY = [alloc("busy", "T4", 1, {"t4-000": 4})]
ORDERS = [
    # (type_order, precision, expected order)
    # default, fp32: by peak rate V100 15.7 > P100 9.3 > T4 8.1 > K80 4.37 (free GPUs do not matter)
    (None, "fp32", ("V100", "P100", "T4", "K80")),
    # default, amp: V100 125 > T4 65 > P100 18.7 > K80 4.37 (the T4's tensor cores beat the P100)
    (None, "amp", ("V100", "T4", "P100", "K80")),
    # the admin's order first; the unlisted types after it by peak rate (fp32: V100 > T4)
    (("P100", "K80"), "fp32", ("P100", "K80", "V100", "T4")),
    (("K80", "T4", "P100", "V100"), "fp32", ("K80", "T4", "P100", "V100")),
]  # fmt: skip


@pytest.mark.parametrize(("type_order", "precision", "expected"), ORDERS)
def test_preference_order(
    type_order: tuple[str, ...] | None, precision: str, expected: tuple[str, ...]
) -> None:
    snap = snapshot(NODES, allocations=BUSY)
    pref = TypePreference(FreeByType(snap), type_order)
    j = with_(job("j").build(), precision=precision)
    assert pref.order(j, type_infos(snap)) == expected


def test_equal_preference_goes_to_the_type_with_most_free_gpus() -> None:
    # two types the catalogue does not know (peak 0 each, both unlisted): "Beta" has 4 free GPUs, "Alpha"
    # 2, so Beta first although Alpha sorts first by name; V100 (known, 15.7) before both
    nodes = cluster(("Alpha", 1, 2), ("Beta", 1, 4), ("V100", 1, 1))
    snap = snapshot(nodes)
    pref = TypePreference(FreeByType(snap), None)
    assert pref.order(job("j").build(), type_infos(snap)) == ("V100", "Beta", "Alpha")


@pytest.mark.parametrize("name", ORDERING)
def test_ordered_puts_each_job_on_the_newest_type_with_room(name: str) -> None:
    # one V100 and two K80s; both jobs prefer the V100 (15.7 > 4.37 TFLOP/s): the first in the policy's
    # order takes it, the second gets a K80 (the V100 is full); the 9x gainer's speed-up is not looked at
    nodes = cluster(("V100", 1, 1), ("K80", 1, 2))
    speeds = {("meh", "K80"): 1.0, ("meh", "V100"): 1.2, ("gainer", "K80"): 1.0, ("gainer", "V100"): 9.0}
    jobs = [job("meh").work(10).submitted(0).build(), job("gainer").work(900).submitted(1).build()]
    policy = make_policy(name, {"heterogeneity": "ordered"})
    res = run_round(snapshot(nodes, now=10), jobs, policy, FakeOracle(speed=speeds))
    assert placed(res) == {"meh": "V100", "gainer": "K80"}


@pytest.mark.parametrize("name", ["fifo", "las"])
def test_ordered_fifo_and_las_never_ask_the_oracle(name: str) -> None:
    oracle = FakeOracle()
    jobs = [job("a").work(10).build(), job("b").work(900).build()]
    nodes = cluster(("V100", 1, 1), ("K80", 1, 2))
    run_round(snapshot(nodes), jobs, make_policy(name, {"heterogeneity": "ordered"}), oracle)
    assert oracle.calls == 0


@pytest.mark.parametrize("name", ORDERING)
def test_type_order_reaches_the_placement(name: str) -> None:
    # the admin prefers K80 (say, to keep V100s for another team): the job goes there though V100 is newer
    nodes = cluster(("V100", 1, 1), ("K80", 1, 2))
    policy = make_policy_from_spec(f"{name}:heterogeneity=ordered;type_order=[K80,V100]")
    res = run_round(snapshot(nodes), [job("a").work(10).build()], policy, FakeOracle())
    assert placed(res) == {"a": "K80"}


SPECS = [
    # (spec, type_order after normalisation)
    ("las:heterogeneity=ordered", None),
    ("las:heterogeneity=ordered;type_order=[H100,A100]", ("H100", "A100")),
    ('srsf:heterogeneity=ordered;type_order=["H100", "A100"]', ("H100", "A100")),  # JSON list
    ("fifo:heterogeneity=ordered;type_order=[NVIDIA-A100-SXM4-80GB,V100]", ("A100", "V100")),  # label
    ("ftf:heterogeneity=ordered;type_order=[MysteryGPU]", ("MysteryGPU",)),  # kept: a node may have it
]  # fmt: skip


@pytest.mark.parametrize(("spec", "order"), SPECS)
def test_type_order_specs(spec: str, order: tuple[str, ...] | None) -> None:
    policy: Any = make_policy_from_spec(spec)
    assert policy.config.type_order == order


BAD = [
    ("las:type_order=[H100]", "policy spec 'las:type_order=[H100]': policy 'las': config field "
     "'type_order': only with heterogeneity=ordered, got heterogeneity=aware"),
    ("srsf:heterogeneity=agnostic;type_order=[H100]", "policy spec 'srsf:heterogeneity=agnostic;"
     "type_order=[H100]': policy 'srsf': config field 'type_order': only with heterogeneity=ordered, "
     "got heterogeneity=agnostic"),
    ("las:heterogeneity=ordered;type_order=[H100,A100,H100]", "policy spec 'las:heterogeneity=ordered;"
     "type_order=[H100,A100,H100]': policy 'las': config field 'type_order[2]': duplicate GPU type 'H100'"),
    # a product label and the canonical name of the same type are a duplicate too
    ("fifo:heterogeneity=ordered;type_order=[A100,NVIDIA-A100-SXM4-80GB]", "policy spec 'fifo:heterogeneity="
     "ordered;type_order=[A100,NVIDIA-A100-SXM4-80GB]': policy 'fifo': config field 'type_order[1]': "
     "duplicate GPU type 'NVIDIA-A100-SXM4-80GB' (the catalogue's A100)"),
    ("las:heterogeneity=ordered;type_order=[]", "policy spec 'las:heterogeneity=ordered;type_order=[]': "
     "policy 'las': config field 'type_order': empty; name at least one GPU type (or leave it out)"),
    ("las:heterogeneity=ordered;type_order=H100", "policy spec 'las:heterogeneity=ordered;type_order=H100': "
     "policy 'las' config field 'type_order': must be a list, got 'H100'"),
    ("las:heterogeneity=newest", "policy spec 'las:heterogeneity=newest': policy 'las' config field "
     "'heterogeneity': must be one of 'aware', 'ordered', 'agnostic', got 'newest'"),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "message"), BAD)
def test_bad_type_order_is_one_line_naming_it(spec: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        make_policy_from_spec(spec)
    assert str(err.value) == message
    assert "\n" not in str(err.value)


def test_an_entry_no_node_has_and_the_catalogue_does_not_know_is_refused() -> None:
    # "MysteryGPU" passes the config (a node of an unknown product is typed by its raw label) but not a
    # cluster without it; "H100" is known to the catalogue, so a cluster without H100s accepts it
    policy = make_policy_from_spec("las:heterogeneity=ordered;type_order=[H100,MysteryGPU]")
    assert unknown_type_order_entries(("H100", "MysteryGPU"), ["V100"]) == ["MysteryGPU"]
    check_policy_type_order(policy, ["V100", "MysteryGPU"])
    with pytest.raises(ConfigError, match="'type_order': unknown GPU type 'MysteryGPU': no node"):
        check_policy_type_order(policy, ["V100"])
