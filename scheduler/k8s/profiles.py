"""Reading the operator profile a TrainingJob's ``spec.modelProfile`` points to.

Adapter (reads ConfigMaps through ``KubeApi``, the only way the operator reaches the API). ``ModelProfiles
.resolve`` returns the ``perfmodel.profile.OperatorProfile`` stored under ``key`` in the ConfigMap
``configMapName`` of the job's namespace, or one line naming why it cannot: the ConfigMap or the key is
missing, the text is not JSON, the document is not a valid profile (``perfmodel.profile.load_profile``'s
message), or the API failed. A parsed profile is kept per ConfigMap resourceVersion, so an unchanged
ConfigMap is parsed once; the ConfigMap itself is read every round (one GET per job with a profile).
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from perfmodel.errors import ProfileError
from perfmodel.profile import OperatorProfile, load_profile
from scheduler.core.errors import PerfschedError
from scheduler.k8s.crd import ModelProfileRef
from scheduler.k8s.kubeapi import KubeApi

log = logging.getLogger(__name__)

#: Parsed profiles kept (least recently used dropped first).
CACHE_SIZE = 256


class ModelProfiles:
    """``spec.modelProfile`` -> the profile, or the problem (module docstring)."""

    def __init__(self, api: KubeApi, cache_size: int = CACHE_SIZE) -> None:
        self.api = api
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple[str, str, str, str], OperatorProfile | str] = OrderedDict()

    def resolve(self, namespace: str, ref: ModelProfileRef) -> OperatorProfile | str:
        """The profile ``ref`` names in ``namespace``, or one line saying why it cannot be used."""
        where = f"spec.modelProfile: ConfigMap {namespace}/{ref.config_map_name}"
        try:
            cm = self.api.get_configmap(namespace, ref.config_map_name)
        except PerfschedError as exc:
            return f"{where} could not be read: {exc}"
        if cm is None:
            return f"{where} does not exist"
        data: Mapping[str, Any] = cm.get("data") or {}
        if ref.key not in data:
            keys = ", ".join(sorted(data)) or "none"
            return f"{where} has no key {ref.key!r} (its keys: {keys})"
        rv = str((cm.get("metadata") or {}).get("resourceVersion", ""))
        ck = (namespace, ref.config_map_name, ref.key, rv)
        hit = self._cache.get(ck)
        if hit is not None and rv:
            self._cache.move_to_end(ck)
            return hit
        result = _parse(where, ref.key, data[ref.key])
        if isinstance(result, str):
            log.warning(
                "invalid model profile",
                extra={"namespace": namespace, "configmap": ref.config_map_name, "error": result},
            )
        self._cache[ck] = result
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return result


def _parse(where: str, key: str, text: Any) -> OperatorProfile | str:
    if not isinstance(text, str):
        return f"{where} key {key!r} is not text"
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"{where} key {key!r} is not JSON ({exc.msg} at line {exc.lineno})"
    try:
        return load_profile(doc)
    except ProfileError as exc:
        return f"{where} key {key!r}: {exc}"
