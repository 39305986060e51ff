"""Building a TrainingJob's status: conditions with honest transition times, and the minimal patch.

Pure. ``set_condition`` keeps ``lastTransitionTime`` when a condition's status does not change (the
Kubernetes convention), so "since when" stays true across rounds and operator restarts.
``status_patch`` turns the old and new status into the JSON merge patch to send (None deletes a key),
leaving out ``placement``, which the extender owns; an empty patch means nothing to write.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.k8s import crd

#: Condition types the operator writes, in the order ``kubectl describe`` shows them.
CONDITION_TYPES = ("Admitted", "Running", "Resized", "Preempted", "Succeeded", "Failed")

#: Status keys owned by other components, never patched by the operator.
FOREIGN_KEYS = frozenset({"placement"})


def set_condition(
    conditions: list[dict[str, Any]],
    type_: str,
    status: bool,
    reason: str,
    message: str,
    *,
    now: float,
    generation: int | None = None,
) -> None:
    """Insert or update condition ``type_`` in place (``lastTransitionTime`` moves only on a flip)."""
    value = "True" if status else "False"
    for c in conditions:
        if c.get("type") == type_:
            if c.get("status") != value:
                c["lastTransitionTime"] = crd.rfc3339(now)
            c["status"] = value
            c["reason"] = reason
            c["message"] = message
            if generation is not None:
                c["observedGeneration"] = generation
            return
    new: dict[str, Any] = {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": message,
        "lastTransitionTime": crd.rfc3339(now),
    }
    if generation is not None:
        new["observedGeneration"] = generation
    conditions.append(new)
    order = {t: i for i, t in enumerate(CONDITION_TYPES)}
    conditions.sort(key=lambda c: order.get(str(c.get("type")), len(order)))


def get_condition(status: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for c in status.get("conditions") or []:
        if c.get("type") == type_:
            return c  # type: ignore[no-any-return]
    return None


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
