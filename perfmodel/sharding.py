"""How a job is split over its GPUs: the sharding spec of LLM jobs and of operator-profile compositions.

``parse_sharding`` reads ``ddp`` (every GPU holds the whole model), ``fsdp`` (PyTorch FSDP FULL_SHARD;
``zero3``/``zero-3`` are aliases: DeepSpeed ZeRO stage 3 shards the same three things), or Megatron-style
model parallelism ``tp<N>xpp<M>`` (``tp<N>`` and ``pp<M>`` alone too), with an optional context-parallel
degree ``xcp<K>``; the data-parallel degree is what is left: GPUs / (tp x pp x cp). ``SHARDING_PATTERN``
is the grammar (the CRD's ``spec.sharding`` pattern is the same). Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from perfmodel.errors import InvalidInputError

SHARDING_KINDS = ("ddp", "fsdp", "tp")


#: The sharding spec grammar (the CRD's ``spec.sharding`` pattern is the same, case-insensitive here).
SHARDING_PATTERN = r"^(ddp|fsdp|zero-?3|(tp[1-9][0-9]*(xpp[1-9][0-9]*)?|pp[1-9][0-9]*)(xcp[1-9][0-9]*)?)$"


_MP = re.compile(
    r"^(?:tp(?P<tp>[1-9]\d*)(?:xpp(?P<pp>[1-9]\d*))?|pp(?P<pp1>[1-9]\d*))(?:xcp(?P<cp>[1-9]\d*))?$"
)


@dataclass(frozen=True, slots=True)
class Sharding:
    """How a model is split over GPUs: ``kind`` ddp | fsdp | tp (model parallel: ``tp`` x ``pp`` x ``cp``)."""

    kind: str
    tp: int = 1
    pp: int = 1
    cp: int = 1

    @property
    def model_parallel(self) -> int:
        """GPUs one model replica spans (1 for ddp and fsdp)."""
        return self.tp * self.pp * self.cp

    def data_parallel(self, num_gpus: int) -> int:
        """Data-parallel degree on ``num_gpus`` GPUs (``InvalidInputError`` when they do not divide)."""
        mp = self.model_parallel
        if num_gpus % mp:
            raise InvalidInputError(
                f"sharding: {self} splits the model over {mp} GPUs; "
                f"{num_gpus} GPUs are not a multiple of {mp}"
            )
        return num_gpus // mp

    def __str__(self) -> str:
        if self.kind != "tp":
            return self.kind
        return f"tp{self.tp}xpp{self.pp}" + (f"xcp{self.cp}" if self.cp > 1 else "")


def parse_sharding(text: str | None) -> Sharding:
    """Parse a sharding spec (module docstring); empty means fsdp.

    ``InvalidInputError`` names the ``sharding`` field."""
    s = (text or "").strip().lower()
    if not s or s in ("fsdp", "zero3", "zero-3", "full_shard"):
        return Sharding("fsdp")
    if s == "ddp":
        return Sharding("ddp")
    m = _MP.fullmatch(s)
    if m is None:
        raise InvalidInputError(
            f"sharding: cannot parse {text!r}; use ddp, fsdp (or zero3), or tp<N>xpp<M> (e.g. tp4xpp2, "
            "optionally xcp<K>)"
        )
    pp = m.group("pp") or m.group("pp1") or 1
    return Sharding("tp", int(m.group("tp") or 1), int(pp), int(m.group("cp") or 1))
