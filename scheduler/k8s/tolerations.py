"""Whether tolerations let pods stay where ``NoExecute`` taints are: node taints (a pod spec's
tolerations) and DRA device taints (a device request's tolerations, which have the same fields and
matching rules). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def tolerates_no_execute(tolerations: object, taints: Sequence[tuple[str, str]]) -> bool:
    """Whether ``tolerations`` (a pod spec's, or a DRA device request's) let its pods stay on a node (or
    on devices) with these ``NoExecute`` taints (key, value) for good, as the taint manager decides: for
    every taint, a toleration whose effect is ``NoExecute`` or empty, whose key is the taint's (or empty
    with ``Exists``), and whose value matches (``Equal``, the default) or is not compared (``Exists``),
    with no ``tolerationSeconds`` (a pod that tolerates a taint only for a while is evicted after it).
    Pure; malformed entries tolerate nothing."""
    if not isinstance(tolerations, list):
        return not taints

    def one(key: str, value: str) -> bool:
        for t in tolerations:
            if not isinstance(t, Mapping) or t.get("tolerationSeconds") is not None:
                continue
            if t.get("effect") not in (None, "", "NoExecute"):
                continue
            op = t.get("operator") or "Equal"
            if op == "Exists" and t.get("key") in (None, "", key):
                return True
            if op == "Equal" and t.get("key") == key and str(t.get("value") or "") == value:
                return True
        return False

    return all(one(k, v) for k, v in taints)
