"""The learning oracle's state kept in a ConfigMap, so that a new operator process (a restart, an upgrade,
a new leader) starts from what the cluster taught the predictor instead of cold.

Shell module (I/O through a ``KubeApi``). What is stored (``encode``): a schema version; the oracle's
state (``scheduler.oracles.learning.CorrectedOracle.state``: the offline model's id, the corrector's
records of live and ended jobs and its fitted levels, the held-out answers); and the operator's view of
the TrainingJobs that state accounts for: each live job's uid and the time of its last progress report
learnt (so that the same report is not learnt twice), and the uids of the latest ``ENDED_MAX`` finished
jobs learnt (so that the replay from TrainingJob status skips them), with the completion time below which
every older finished job counts as learnt. JSON, zlib-compressed, in ``binaryData`` under ``KEY``.

``decode`` turns what it reads into a ``Restored`` or one line naming why it cannot be used (missing,
corrupt, a newer or older schema, another offline model or corrector settings); the operator logs that
line once and goes on with the replay alone. ``StateStore`` reads and writes the ConfigMap; it writes
only what changed since its last write, and a state larger than ``MAX_BYTES`` compressed is not written
(logged once with its size).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.k8s.errors import AlreadyExists, Conflict, KubeApiError, NotFound
from scheduler.k8s.kubeapi import KubeApi

log = logging.getLogger(__name__)

#: the layout of the stored state; a state of another schema is not restored
SCHEMA = 1
KEY = "learning-state.json.zlib"
#: the largest compressed state written: a ConfigMap holds at most 1 MiB, with room for its metadata
MAX_BYTES = 900 * 1024
#: finished jobs whose uids the state lists (the replay never replays more: ``reconcile.REPLAY_MAX``)
ENDED_MAX = 4096


@dataclass(frozen=True, slots=True)
class Restored:
    """A state read back: the oracle's part, and the TrainingJobs it accounts for."""

    oracle: Mapping[str, Any]
    #: live job key -> (uid, time of the last progress report learnt, or None)
    live: dict[str, tuple[str, float | None]]
    #: uids of finished jobs learnt
    ended: frozenset[str]
    #: a finished job that completed before this (RFC 3339, compared as text) counts as learnt
    ended_before: str


def encode(
    oracle_state: Mapping[str, Any],
    live: Mapping[str, tuple[str, float | None]],
    ended: Mapping[str, tuple[str, str]],
) -> bytes:
    """The compressed state: ``live`` maps a live job's key to (uid, last report learnt), ``ended`` a
    finished job's key to (uid, completion time); the latest ``ENDED_MAX`` of them are listed."""
    latest = sorted(ended.values(), key=lambda e: (e[1], e[0]))
    kept = latest[-ENDED_MAX:]
    cutoff = kept[0][1] if len(latest) > ENDED_MAX else ""
    doc = {
        "schema": SCHEMA,
        "oracle": oracle_state,
        "live": {k: [uid, t] for k, (uid, t) in sorted(live.items())},
        "ended": sorted(uid for uid, _ in kept),
        "endedBefore": cutoff,
    }
    return zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 9)


def decode(blob: bytes) -> Restored | str:
    """The state in ``blob``, or why it cannot be used (one line)."""
    try:
        doc = json.loads(zlib.decompress(blob))
    except (zlib.error, ValueError) as exc:
        return f"corrupt ({type(exc).__name__}: {str(exc)[:80]})"
    if not isinstance(doc, dict):
        return "corrupt (not a JSON object)"
    schema = doc.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool):
        return f"corrupt (schema {str(schema)[:20]!r})"
    if schema != SCHEMA:
        newer = "newer" if schema > SCHEMA else "older"
        return f"schema {schema} is {newer} than this operator's {SCHEMA}"
    oracle, live, ended, cutoff = doc.get("oracle"), doc.get("live"), doc.get("ended"), doc.get("endedBefore")
    if not isinstance(oracle, dict) or not isinstance(live, dict) or not isinstance(ended, list):
        return "corrupt (oracle, live or ended missing)"
    if not isinstance(cutoff, str):
        return "corrupt (endedBefore missing)"
    out: dict[str, tuple[str, float | None]] = {}
    for key, v in live.items():
        if not (isinstance(v, list) and len(v) == 2 and isinstance(v[0], str)):
            return f"corrupt (live job {key[:60]!r})"
        if v[1] is not None and not isinstance(v[1], int | float):
            return f"corrupt (live job {key[:60]!r})"
        out[key] = (v[0], None if v[1] is None else float(v[1]))
    if not all(isinstance(u, str) for u in ended):
        return "corrupt (ended uids)"
    return Restored(oracle, out, frozenset(ended), cutoff)


@dataclass(slots=True)
class StateStore:
    """The ConfigMap ``name`` in ``namespace`` that holds the state (see the module docstring)."""

    api: KubeApi
    namespace: str
    name: str
    _last: bytes = b""
    _warned: set[str] = field(default_factory=set)

    def _once(self, what: str, message: str, **extra: object) -> None:
        """Log ``message`` at warning level the first time ``what`` happens, at debug level after."""
        level = logging.DEBUG if what in self._warned else logging.WARNING
        self._warned.add(what)
        log.log(level, message, extra={"configmap": f"{self.namespace}/{self.name}", **extra})

    def read(self) -> Restored | str:
        """The stored state, or why there is none to use (one line)."""
        try:
            cm = self.api.get_configmap(self.namespace, self.name)
        except KubeApiError as exc:
            return f"cannot be read ({type(exc).__name__}: {str(exc)[:120]})"
        if cm is None:
            return "missing (no ConfigMap yet)"
        raw = (cm.get("binaryData") or {}).get(KEY)
        if not isinstance(raw, str):
            return f"corrupt (no binaryData key {KEY})"
        try:
            blob = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError) as exc:
            return f"corrupt (base64: {exc})"
        got = decode(blob)
        if isinstance(got, Restored):
            self._last = blob
        return got

    def write(self, blob: bytes) -> bool:
        """Store ``blob`` unless it is what was last written or read, or larger than ``MAX_BYTES``.
        Returns whether it wrote; an API failure is logged once and retried at the next write."""
        if blob == self._last:
            return False
        if len(blob) > MAX_BYTES:
            self._once("size", "learning state too large to store; not written", bytes=len(blob))
            return False
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name,
                "labels": {"app.kubernetes.io/managed-by": "perfsched"},
                "annotations": {"perfsched.dev/learning-state-schema": str(SCHEMA)},
            },
            "binaryData": {KEY: base64.b64encode(blob).decode()},
        }
        try:
            cur = self.api.get_configmap(self.namespace, self.name)
            if cur is None:
                self.api.create_configmap(self.namespace, body)
            else:
                body["metadata"]["resourceVersion"] = (cur.get("metadata") or {}).get("resourceVersion")
                self.api.replace_configmap(self.namespace, self.name, body)
        except (AlreadyExists, Conflict, NotFound) as exc:  # raced with another writer: next time
            log.info("learning state not written (raced)", extra={"error": str(exc)})
            return False
        except KubeApiError as exc:
            self._once("api", "learning state not written", error=str(exc)[:200])
            return False
        self._last = blob
        return True
