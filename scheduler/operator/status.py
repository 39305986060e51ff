"""Building a TrainingJob's status through its pydantic model: conditions, copies, the wire form, the patch.

Pure. ``with_condition`` keeps ``lastTransitionTime`` when a condition's status does not change (the
Kubernetes convention), so "since when" stays true across rounds and operator restarts. ``evolve`` copies
a ``TrainingJobStatus`` with changed fields (None removes a field from the wire form).
``status_wire`` is the API JSON of a status: the fields the stored status had plus those a transition
set, camelCase. ``status_patch`` turns the stored and the new wire status into the JSON merge patch to
send (None deletes a key), leaving out ``placement``, which the extender owns; an empty patch means
nothing to write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from scheduler.k8s import crd

#: Condition types the operator writes, in the order ``kubectl describe`` shows them.
CONDITION_TYPES = ("Admitted", "Running", "Resized", "Preempted", "Succeeded", "Failed", "ModelProfile")

#: Status keys owned by other components, never patched by the operator.
FOREIGN_KEYS = frozenset({"placement"})

_ORDER = {t: i for i, t in enumerate(CONDITION_TYPES)}
_FIELDS = frozenset(crd.TrainingJobStatus.model_fields)


def with_condition(
    conditions: Sequence[crd.Condition],
    type_: str,
    status: bool,
    reason: str,
    message: str,
    *,
    now: float,
) -> tuple[crd.Condition, ...]:
    """``conditions`` with condition ``type_`` set (``lastTransitionTime`` moves only on a flip); a new
    condition takes its place in ``CONDITION_TYPES`` order."""
    value: Literal["True", "False"] = "True" if status else "False"
    out = list(conditions)
    for i, c in enumerate(out):
        if c.type == type_:
            update: dict[str, Any] = {"status": value, "reason": reason, "message": message}
            if c.status != value:
                update["last_transition_time"] = crd.rfc3339(now)
            out[i] = c.model_copy(update=update)
            return tuple(out)
    out.append(
        crd.Condition(
            type=type_, status=value, reason=reason, message=message, last_transition_time=crd.rfc3339(now)
        )
    )
    out.sort(key=lambda c: _ORDER.get(c.type, len(_ORDER)))
    return tuple(out)


def evolve(status: crd.TrainingJobStatus, **changes: Any) -> crd.TrainingJobStatus:
    """A copy of ``status`` with ``changes`` (snake_case field names; None drops a field from the wire).

    ``model_copy`` does not validate: the names are checked here, the values come from typed code (the
    transition table's tests write out every status it produces).
    """
    unknown = changes.keys() - _FIELDS
    if unknown:
        raise TypeError(f"not fields of TrainingJobStatus: {sorted(unknown)}")
    return status.model_copy(update=changes)


def status_wire(status: crd.TrainingJobStatus) -> dict[str, Any]:
    """The status as API JSON: every field that was stored or set, camelCase, None left out."""
    return status.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude_none=True)


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch from ``old`` to ``new`` (top-level keys; nested objects are sent whole)."""
    patch: dict[str, Any] = {}
    for key, value in new.items():
        if key in FOREIGN_KEYS:
            continue
        if old.get(key) != value:
            patch[key] = value
    for key in old:
        if key not in new and key not in FOREIGN_KEYS:
            patch[key] = None
    # A nested object sent whole over a merge patch merges with the stored one: null out dropped keys.
    for key, value in list(patch.items()):
        patch[key] = _with_deletions(old.get(key), value)
    return patch


def _with_deletions(prev: Any, value: Any) -> Any:
    if not isinstance(value, Mapping) or not isinstance(prev, Mapping):
        return value
    out: dict[str, Any] = {k: None for k in prev if k not in value}
    for k, v in value.items():
        out[k] = _with_deletions(prev.get(k), v)
    return out
