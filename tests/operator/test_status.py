"""The status helpers: condition transition times, copies through the model, the wire form, the patch."""

from __future__ import annotations

import pytest

from scheduler.k8s import crd
from scheduler.operator.status import evolve, status_patch, status_wire, with_condition

T = 1_800_000_000.0


def test_a_condition_moves_its_transition_time_only_when_it_flips() -> None:
    conds = with_condition((), "Running", False, "PodsStarting", "0/2", now=T)
    same = with_condition(conds, "Running", False, "PodsStarting", "1/2", now=T + 10)
    flipped = with_condition(same, "Running", True, "AllReplicasRunning", "2/2", now=T + 20)
    assert [(c.message, c.last_transition_time) for c in (*conds, *same, *flipped)] == [
        ("0/2", crd.rfc3339(T)),
        ("1/2", crd.rfc3339(T)),  # same status: since T still
        ("2/2", crd.rfc3339(T + 20)),
    ]


def test_a_new_condition_takes_its_place_in_describe_order() -> None:
    conds = with_condition((), "Succeeded", True, "Completed", "done", now=T)
    conds = with_condition(conds, "Admitted", True, "Started", "go", now=T)
    conds = with_condition(conds, "Running", False, "Completed", "x", now=T)
    assert [c.type for c in conds] == ["Admitted", "Running", "Succeeded"]


def test_the_wire_form_has_what_was_stored_or_set_and_drops_none() -> None:
    stored = crd.TrainingJobStatus.model_validate({"phase": "Running", "progress": 5, "accountedTime": T})
    new = evolve(stored, restarts=1, accounted_time=None, placement={"p": "n1"})
    # restarts set, accountedTime dropped, defaults never stored (resizes, lostWork, ...) stay out
    assert status_wire(new) == {"phase": "Running", "progress": 5.0, "restarts": 1, "placement": {"p": "n1"}}
    with pytest.raises(TypeError, match="restart"):
        evolve(stored, restart=1)


def test_the_patch_nulls_dropped_keys_and_leaves_the_extenders_placement_alone() -> None:
    old = {
        "phase": "Running",
        "accountedTime": T,
        "placement": {"a": "n1"},
        "allocation": {"replicas": 2, "x": 1},
    }
    new = {"phase": "Preempted", "allocation": {"replicas": 2}}
    assert status_patch(old, new) == {
        "phase": "Preempted",
        "accountedTime": None,
        "allocation": {"replicas": 2, "x": None},
    }
    assert status_patch(new, new) == {}
