"""The ModelProfile condition of a TrainingJob with ``spec.modelProfile``.

Pure. ``profile_condition`` says what became of the job's operator profile (``Loaded``, with its model,
operator count and FLOPs, or ``InvalidModelProfile`` naming the problem and what the job does instead);
``with_profile_condition`` puts that condition into the status a transition writes, or into a status of
its own when the transition writes none, so that it is set in the round the profile is read and left
alone (same transition time) while nothing changes. Finished jobs are left as they are.
"""

from __future__ import annotations

from dataclasses import replace

from perfmodel.profile import OperatorProfile
from scheduler.k8s import crd
from scheduler.operator.status import evolve, with_condition
from scheduler.operator.transitions import Outcome

#: The condition type.
MODEL_PROFILE = "ModelProfile"

Condition = tuple[bool, str, str]


def profile_condition(spec: crd.TrainingJobSpec, namespace: str, profile: OperatorProfile | str) -> Condition:
    """(status, reason, message) of the ModelProfile condition for ``profile`` (or the problem)."""
    ref = spec.model_profile
    assert ref is not None, "only jobs with spec.modelProfile have the condition"
    if isinstance(profile, str):
        fallback = (
            f"predicting from spec.model {spec.model!r} instead"
            if spec.model is not None
            else "predicting from spec.modelParams instead"
            if spec.model_params is not None
            else "the job waits until it is fixed"
        )
        return False, "InvalidModelProfile", f"{profile}; {fallback}"
    return (
        True,
        "Loaded",
        f"{profile.model.name} from ConfigMap {namespace}/{ref.config_map_name} key {ref.key!r}: "
        f"{len(profile.operators)} operators, {profile.model.parameters:,} parameters, "
        f"{profile.train_flops_per_sample:.4g} training FLOPs per sample",
    )


def with_profile_condition(
    stored: crd.TrainingJobStatus, out: Outcome, cond: Condition | None, now: float
) -> Outcome:
    """``out`` with the ModelProfile condition ``cond`` in the status it writes (``stored``: the job's
    status as stored, used when ``out`` writes none); unchanged without a condition or for a finished job."""
    if cond is None or stored.phase in crd.TERMINAL_PHASES:
        return out
    base = out.status if out.status is not None else stored
    conds = with_condition(base.conditions, MODEL_PROFILE, *cond, now=now)
    if conds == base.conditions:
        return out
    return replace(out, status=evolve(base, conditions=conds))
