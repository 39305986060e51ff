"""The operator recorder under the analytic profile builder (``perfmodel.profile_net.Net``).

``OpRecorder`` keeps one training step's operators in profile JSON form: each layer call records its
forward operator and the backward operators autograd would run for it (``_emit``), inside named scopes
(``scope``) and repeated blocks (``repeat(n)`` stores the operators of n identical layers once with
``count = n``), and registers the layer's parameters (``param``). ``finish`` puts the backward operators
in reverse order, appends the optimizer's update of every parameter tensor (``perfmodel.opcount``) and
returns an ``OperatorProfile``. Pure module.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from perfmodel.opcount import numel, operator_bytes, optimizer_operators
from perfmodel.profile import OperatorProfile, Sample, Source, load_profile

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class T:
    """An activation: its shape and whether it depends on parameters (then it gets a gradient)."""

    shape: Shape
    grad: bool = True


class OpRecorder:
    """Records the operators of one training step and the parameters they use (module docstring);
    ``perfmodel.profile_net.Net`` adds the layers."""

    def __init__(self, name: str, batch: int, optimizer: str = "adamw") -> None:
        self.name = name
        self.batch = batch
        self.optimizer = optimizer
        self._fwd: list[dict[str, Any]] = []
        self._bwd: list[list[dict[str, Any]]] = []
        self._params: list[tuple[str, Shape, int]] = []
        self._scope: list[str] = []
        self._mult = 1
        self._pmult = 1
        self._auto: dict[str, int] = {}

    # ------------------------------------------------------------ scopes

    @contextmanager
    def scope(self, name: str) -> Iterator[None]:
        self._scope.append(name)
        try:
            yield
        finally:
            self._scope.pop()

    @contextmanager
    def repeat(self, n: int, name: str = "layers.*", shared: bool = False) -> Iterator[None]:
        """Operators inside are counted ``n`` times (identical layers); their parameters too, unless
        ``shared`` (one module applied ``n`` times: a recurrent cell over time steps)."""
        self._mult *= n
        if not shared:
            self._pmult *= n
        self._scope.append(name)
        try:
            yield
        finally:
            self._scope.pop()
            self._mult //= n
            if not shared:
                self._pmult //= n

    def _path(self, name: str) -> str:
        base = ".".join([*self._scope, name]) if name else ".".join(self._scope)
        k = self._auto.get(base, 0)
        self._auto[base] = k + 1
        return base if k == 0 else f"{base}#{k}"

    def _op(
        self,
        name: str,
        op: str,
        cls: str,
        ins: Sequence[Shape],
        out: Shape,
        flops: float,
        phase: str,
        gemm: tuple[int, int, int, int] | None = None,
        extra_out: Sequence[Shape] = (),
    ) -> dict[str, Any]:
        """One operator in profile JSON form (a ``grad_weight`` GEMM reduces over the batch: ``k``)."""
        d: dict[str, Any] = {
            "name": name,
            "op": op,
            "class": cls,
            "phase": phase,
            "shapes": {"inputs": [list(s) for s in ins], "output": list(out)},
        }
        if gemm is not None:
            m, n, k, b = gemm
            d["gemm"] = {"m": m, "n": n, "k": k, "batch": b}
            if name.endswith("grad_weight"):
                d["gemm"]["batch_dim"] = "k"
        d.update(
            flops=float(flops),
            bytes=operator_bytes(op, ins, [out, *extra_out]),
            scales_with_batch=True,
            count=self._mult,
        )
        return d

    def _emit(self, fwd: dict[str, Any], bwd: list[dict[str, Any]]) -> None:
        self._fwd.append(fwd)
        self._bwd.append(bwd)

    def param(self, name: str, shape: Shape) -> Shape:
        self._params.append((".".join([*self._scope, name]), shape, self._pmult))
        return shape

    # ------------------------------------------------------------ result

    @property
    def parameters(self) -> int:
        return sum(numel(s) * c for _, s, c in self._params)

    def finish(self, source: Source, sample: Sample, name: str | None = None) -> OperatorProfile:
        """The profile: forward operators, backward in reverse, then the optimizer over every parameter."""
        ops = list(self._fwd)
        for bwd in reversed(self._bwd):
            ops.extend(bwd)
        ops.extend(
            optimizer_operators(
                [(n, s) for n, s, _ in self._params], self.optimizer, [c for _, _, c in self._params]
            )
        )
        total = math.fsum(o["flops"] * o["count"] for o in ops)
        doc = {
            "schema_version": 1,
            "model": {"name": name or self.name, "source": source.value, "parameters": self.parameters},
            "batch_size": self.batch,
            "sample": _sample_json(sample),
            "operators": ops,
            "train_flops_per_sample": total / self.batch,
            "param_bytes_by_dtype": {"float32": 4 * self.parameters},
        }
        return load_profile(doc)


def _sample_json(sample: Sample) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if sample.input_shape is not None:
        d["input_shape"] = list(sample.input_shape)
    if sample.sequence_length is not None:
        d["sequence_length"] = sample.sequence_length
    return d
