"""Operator profiles: one training step of a model as a sequence of operators (schema, load, dump, checks).

An ``OperatorProfile`` lists the operators of one training step (forward, backward, optimizer) at one
per-GPU micro-batch: each operator's kind (``class``), shapes, FLOPs and bytes moved, and for GEMM-like
operators the implicit GEMM dimensions. It is what ``perfsched profile`` writes (from a PyTorch module, a
zoo name or an LLM config) and what the per-operator cost model and the step composition read. The JSON
document (``schema_version: 1``, documented in docs/profile.md)::

    {"schema_version": 1,
     "model": {"name": "resnet50", "source": "zoo", "parameters": 25557032},
     "batch_size": 32,
     "sample": {"input_shape": [3, 224, 224]},          # or {"sequence_length": 2048}
     "operators": [
       {"name": "layer1.0.conv1", "op": "aten.convolution", "class": "gemm", "phase": "forward",
        "shapes": {"inputs": [[32, 64, 56, 56], [64, 64, 1, 1]], "output": [32, 64, 56, 56]},
        "gemm": {"m": 100352, "n": 64, "k": 64, "batch": 1},   # "batch_dim": "k" on weight gradients
        "flops": 4.1e8, "bytes": 2.6e7, "scales_with_batch": true, "count": 1}, ...],
     "train_flops_per_sample": 1.23e10,
     "param_bytes_by_dtype": {"float32": 102228128}}

Conventions: ``flops`` and ``bytes`` are those of one instance of the operator at the profiled
``batch_size``; ``count`` repeats it (identical transformer layers are stored once); bytes are counted
with 4-byte elements (a composer rescales them for the precision); one multiply-add is 2 FLOPs;
``scales_with_batch`` says whether the operator's FLOPs, bytes and GEMM ``m`` grow linearly with the
micro-batch (activations) or not (optimizer updates, weight-only operators). ``train_flops_per_sample``
is the whole step's FLOPs divided by ``batch_size`` and must agree with the operators within 1%.
Collectives are not in a profile: they depend on the parallelism and the network, not on the model alone.

Bad input raises ``ProfileError`` (a ``perfmodel.errors.InvalidInputError``) with one line naming the
field. Pure module (stdlib only).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from perfmodel.errors import ProfileError

SCHEMA_VERSION = 1
"""The profile document version this module reads and writes."""

BYTES_PER_ELEMENT = 4
"""Element size the ``bytes`` of a profile are counted in (fp32)."""

_TRAIN_FLOPS_TOLERANCE = 0.01


class Phase(StrEnum):
    """Which part of a training step an operator belongs to."""

    FORWARD = "forward"
    BACKWARD = "backward"
    OPTIMIZER = "optimizer"


class OpClass(StrEnum):
    """Operator class: decides which cost model prices the operator.

    ``gemm`` (matmul, linear, convolution as an implicit GEMM), ``attention`` (a fused attention kernel,
    flash-style: scores, softmax and weighted values as one operator), ``elementwise`` (activations, adds,
    dropout, casts), ``normalization`` (batch/layer/RMS norm), ``reduction`` (sums, means, softmax,
    losses, pooling), ``embedding`` (table lookups and their gradient scatter), ``memory`` (copies,
    concatenations, transposes that move data), ``optimizer`` (the parameter update).
    """

    GEMM = "gemm"
    ATTENTION = "attention"
    ELEMENTWISE = "elementwise"
    NORMALIZATION = "normalization"
    REDUCTION = "reduction"
    EMBEDDING = "embedding"
    MEMORY = "memory"
    OPTIMIZER = "optimizer"


class Source(StrEnum):
    """Where a profile came from."""

    ZOO = "zoo"
    TORCH = "torch"
    LLM = "llm"


Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class GemmDims:
    """Implicit GEMM dimensions: ``batch`` independent (m x k) @ (k x n) products.

    ``batch_dim`` names the dimension that grows with the micro-batch: ``m`` (activations: a forward
    GEMM, an input gradient) or ``k`` (a weight gradient, which reduces over the batch's rows).
    """

    m: int
    n: int
    k: int
    batch: int = 1
    batch_dim: str = "m"

    @property
    def flops(self) -> float:
        """2 m n k per product (one multiply-add = 2 FLOPs)."""
        return 2.0 * self.m * self.n * self.k * self.batch


@dataclass(frozen=True, slots=True)
class OpShapes:
    """Tensor shapes of an operator: its tensor inputs and its (first) output."""

    inputs: tuple[Shape, ...] = ()
    output: Shape = ()


@dataclass(frozen=True, slots=True)
class Operator:
    """One operator of a training step (one instance; ``count`` identical ones)."""

    name: str
    op: str
    op_class: OpClass
    phase: Phase
    flops: float
    bytes: float
    shapes: OpShapes = field(default_factory=OpShapes)
    gemm: GemmDims | None = None
    scales_with_batch: bool = True
    count: int = 1

    @property
    def total_flops(self) -> float:
        """FLOPs of all ``count`` instances."""
        return self.flops * self.count

    @property
    def total_bytes(self) -> float:
        """Bytes of all ``count`` instances."""
        return self.bytes * self.count

    def at_batch(self, old_batch: int, new_batch: int) -> Operator:
        """This operator at micro-batch ``new_batch`` instead of ``old_batch`` (batch-scaled ones only).

        FLOPs and bytes scale linearly; the GEMM's ``batch_dim`` (``m`` or ``k``) is rounded to the nearest
        integer of at least 1; a shape whose leading dimension is ``old_batch`` gets ``new_batch`` there
        (weights keep theirs).
        """
        if not self.scales_with_batch or old_batch == new_batch:
            return self
        factor = new_batch / old_batch
        gemm = self.gemm
        if gemm is not None:
            if gemm.batch_dim == "k":
                gemm = replace(gemm, k=max(1, round(gemm.k * factor)))
            else:
                gemm = replace(gemm, m=max(1, round(gemm.m * factor)))

        def lead(s: Shape) -> Shape:
            return (new_batch, *s[1:]) if s and s[0] == old_batch else s

        shapes = OpShapes(tuple(lead(s) for s in self.shapes.inputs), lead(self.shapes.output))
        return replace(self, flops=self.flops * factor, bytes=self.bytes * factor, gemm=gemm, shapes=shapes)


@dataclass(frozen=True, slots=True)
class ModelRef:
    """What model a profile describes: its name, the route that made it, its parameter count."""

    name: str
    source: Source
    parameters: int


@dataclass(frozen=True, slots=True)
class Sample:
    """What one sample is: an input tensor shape (without the batch) or a token sequence length."""

    input_shape: Shape | None = None
    sequence_length: int | None = None


@dataclass(frozen=True, slots=True)
class OperatorProfile:
    """The operators of one training step of a model at micro-batch ``batch_size`` (module docstring)."""

    model: ModelRef
    batch_size: int
    sample: Sample
    operators: tuple[Operator, ...]
    train_flops_per_sample: float
    param_bytes_by_dtype: Mapping[str, int] | None = None
    schema_version: int = SCHEMA_VERSION

    def step_flops(self, phase: Phase | None = None) -> float:
        """FLOPs of one step at the profiled batch (all phases, or one)."""
        return math.fsum(o.total_flops for o in self.operators if phase is None or o.phase == phase)

    def step_bytes(self, phase: Phase | None = None) -> float:
        """Bytes moved by one step at the profiled batch (all phases, or one)."""
        return math.fsum(o.total_bytes for o in self.operators if phase is None or o.phase == phase)

    def at_batch(self, batch_size: int) -> OperatorProfile:
        """The same step at another micro-batch: batch-scaled operators rescaled linearly."""
        if batch_size <= 0:
            raise ProfileError(f"batch_size must be a positive integer, got {batch_size}")
        if batch_size == self.batch_size:
            return self
        ops = tuple(o.at_batch(self.batch_size, batch_size) for o in self.operators)
        flops = math.fsum(o.total_flops for o in ops)
        return replace(self, batch_size=batch_size, operators=ops, train_flops_per_sample=flops / batch_size)

    def to_json(self) -> dict[str, Any]:
        """The JSON document (a dict of plain types; ``json.dumps`` writes it)."""
        sample: dict[str, Any] = {}
        if self.sample.input_shape is not None:
            sample["input_shape"] = list(self.sample.input_shape)
        if self.sample.sequence_length is not None:
            sample["sequence_length"] = self.sample.sequence_length
        doc: dict[str, Any] = {
            "schema_version": self.schema_version,
            "model": {
                "name": self.model.name,
                "source": self.model.source.value,
                "parameters": self.model.parameters,
            },
            "batch_size": self.batch_size,
            "sample": sample,
            "operators": [_op_to_json(o) for o in self.operators],
            "train_flops_per_sample": self.train_flops_per_sample,
        }
        if self.param_bytes_by_dtype is not None:
            doc["param_bytes_by_dtype"] = dict(self.param_bytes_by_dtype)
        return doc


def profile_fingerprint(profile: OperatorProfile) -> tuple[str, str, int, float, int]:
    """A small hashable stand-in for a profile in cache keys: model, source, micro-batch, training
    FLOPs per sample and operator count."""
    return (
        profile.model.name,
        profile.model.source.value,
        profile.batch_size,
        profile.train_flops_per_sample,
        len(profile.operators),
    )


def _op_to_json(o: Operator) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": o.name,
        "op": o.op,
        "class": o.op_class.value,
        "phase": o.phase.value,
        "shapes": {"inputs": [list(s) for s in o.shapes.inputs], "output": list(o.shapes.output)},
    }
    if o.gemm is not None:
        d["gemm"] = {"m": o.gemm.m, "n": o.gemm.n, "k": o.gemm.k, "batch": o.gemm.batch}
        if o.gemm.batch_dim != "m":
            d["gemm"]["batch_dim"] = o.gemm.batch_dim
    d.update(flops=o.flops, bytes=o.bytes, scales_with_batch=o.scales_with_batch, count=o.count)
    return d


def make_profile(
    model: ModelRef,
    batch_size: int,
    sample: Sample,
    operators: Sequence[Operator],
    param_bytes_by_dtype: Mapping[str, int] | None = None,
) -> OperatorProfile:
    """A profile whose ``train_flops_per_sample`` is computed from its operators, checked as on load."""
    flops = math.fsum(o.total_flops for o in operators)
    prof = OperatorProfile(
        model=model,
        batch_size=batch_size,
        sample=sample,
        operators=tuple(operators),
        train_flops_per_sample=flops / batch_size if batch_size > 0 else 0.0,
        param_bytes_by_dtype=param_bytes_by_dtype,
    )
    return load_profile(prof.to_json())


def dump_profile(profile: OperatorProfile, path: str | Path | None = None) -> str:
    """The profile as JSON text (written to ``path`` when given)."""
    text = json.dumps(profile.to_json(), indent=1) + "\n"
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text


# ---------------------------------------------------------------- loading and validation


_TOP_KEYS = {
    "schema_version",
    "model",
    "batch_size",
    "sample",
    "operators",
    "train_flops_per_sample",
    "param_bytes_by_dtype",
}
_OP_KEYS = {"name", "op", "class", "phase", "shapes", "gemm", "flops", "bytes", "scales_with_batch", "count"}


def load_profile(doc: Mapping[str, Any] | str | Path) -> OperatorProfile:
    """Read and check a profile from a dict or a JSON file; ``ProfileError`` names what is wrong."""
    if isinstance(doc, (str, Path)):
        path = Path(doc)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ProfileError(f"profile file {path}: {exc.strerror or exc}") from None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ProfileError(f"profile file {path}: not JSON ({exc.msg} at line {exc.lineno})") from None
        if not isinstance(doc, Mapping):
            raise ProfileError(f"profile file {path}: the document must be a JSON object")
    if not isinstance(doc, Mapping):
        raise ProfileError("profile: the document must be a JSON object")
    version = doc.get("schema_version")
    if version is None:
        raise ProfileError("profile: missing field 'schema_version'")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise ProfileError(
            f"profile: schema_version {version!r} is not supported (this perfsched reads {SCHEMA_VERSION})"
        )
    unknown = sorted(set(doc) - _TOP_KEYS)
    if unknown:
        raise ProfileError(f"profile: unknown field {unknown[0]!r}")
    model = _model(_field(doc, "model", Mapping, "profile"))
    batch = _pos_int(_field(doc, "batch_size", int, "profile"), "batch_size")
    sample = _sample(_field(doc, "sample", Mapping, "profile"))
    raw_ops = _field(doc, "operators", list, "profile")
    if not raw_ops:
        raise ProfileError("profile: 'operators' is empty")
    ops = tuple(_operator(o, i) for i, o in enumerate(raw_ops))
    tfps = _nonneg(_field(doc, "train_flops_per_sample", (int, float), "profile"), "train_flops_per_sample")
    counted = math.fsum(o.total_flops for o in ops) / batch
    if not math.isclose(tfps, counted, rel_tol=_TRAIN_FLOPS_TOLERANCE, abs_tol=1.0):
        raise ProfileError(
            f"profile: train_flops_per_sample {tfps:.6g} disagrees with its operators "
            f"({counted:.6g} per sample at batch_size {batch})"
        )
    pbd: dict[str, int] | None = None
    if "param_bytes_by_dtype" in doc:
        raw = _field(doc, "param_bytes_by_dtype", Mapping, "profile")
        pbd = {}
        for k, v in raw.items():
            if not isinstance(k, str) or not k:
                raise ProfileError("profile: param_bytes_by_dtype keys must be dtype names")
            pbd[k] = int(_nonneg(v, f"param_bytes_by_dtype.{k}"))
    return OperatorProfile(
        model=model,
        batch_size=batch,
        sample=sample,
        operators=ops,
        train_flops_per_sample=float(tfps),
        param_bytes_by_dtype=pbd,
    )


def _field(d: Mapping[str, Any], key: str, typ: type | tuple[type, ...], where: str) -> Any:
    if key not in d:
        raise ProfileError(f"{where}: missing field {key!r}")
    v = d[key]
    bad_bool = isinstance(v, bool) and bool not in (typ if isinstance(typ, tuple) else (typ,))
    if not isinstance(v, typ) or bad_bool:
        names = "/".join(t.__name__ for t in (typ if isinstance(typ, tuple) else (typ,)))
        raise ProfileError(f"{where}: field {key!r} must be {_TYPE_WORDS.get(names, names)}, got {v!r:.60}")
    return v


_TYPE_WORDS = {
    "Mapping": "an object",
    "list": "a list",
    "int": "an integer",
    "int/float": "a number",
    "str": "a string",
    "bool": "true or false",
}


def _pos_int(v: int, name: str) -> int:
    if v <= 0:
        raise ProfileError(f"profile: {name} must be a positive integer, got {v}")
    return v


def _nonneg(v: Any, name: str, where: str = "profile") -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ProfileError(f"{where}: {name} must be a number, got {v!r:.60}")
    f = float(v)
    if not math.isfinite(f) or f < 0:
        raise ProfileError(f"{where}: {name} must be a finite number >= 0, got {v!r}")
    return f


def _model(d: Mapping[str, Any]) -> ModelRef:
    name = _field(d, "name", str, "profile.model")
    if not name.strip():
        raise ProfileError("profile.model: 'name' is empty")
    src = _field(d, "source", str, "profile.model")
    try:
        source = Source(src)
    except ValueError:
        raise ProfileError(
            f"profile.model: unknown source {src!r} (one of {', '.join(s.value for s in Source)})"
        ) from None
    params = _field(d, "parameters", int, "profile.model")
    if params < 0:
        raise ProfileError(f"profile.model: parameters must be >= 0, got {params}")
    return ModelRef(name=name, source=source, parameters=params)


def _shape(v: Any, where: str) -> Shape:
    if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in v):
        raise ProfileError(f"{where} must be a list of non-negative integers, got {v!r:.60}")
    return tuple(v)


def _sample(d: Mapping[str, Any]) -> Sample:
    unknown = sorted(set(d) - {"input_shape", "sequence_length"})
    if unknown:
        raise ProfileError(f"profile.sample: unknown field {unknown[0]!r}")
    if not d:
        raise ProfileError("profile.sample: needs 'input_shape' or 'sequence_length'")
    shape = None
    seq = None
    if "input_shape" in d:
        shape = _shape(d["input_shape"], "profile.sample.input_shape")
        if not shape or 0 in shape:
            raise ProfileError(f"profile.sample.input_shape must be positive integers, got {list(shape)}")
    if "sequence_length" in d:
        seq = _field(d, "sequence_length", int, "profile.sample")
        if seq <= 0:
            raise ProfileError(f"profile.sample: sequence_length must be a positive integer, got {seq}")
    return Sample(input_shape=shape, sequence_length=seq)


def _operator(d: Any, i: int) -> Operator:
    where = f"profile.operators[{i}]"
    if not isinstance(d, Mapping):
        raise ProfileError(f"{where} must be an object")
    if isinstance(d.get("name"), str):
        where = f"profile.operators[{i}] ({d['name']})"
    unknown = sorted(set(d) - _OP_KEYS)
    if unknown:
        raise ProfileError(f"{where}: unknown field {unknown[0]!r}")
    name = _field(d, "name", str, where)
    op = _field(d, "op", str, where)
    cls = _field(d, "class", str, where)
    try:
        op_class = OpClass(cls)
    except ValueError:
        raise ProfileError(
            f"{where}: unknown operator class {cls!r} (one of {', '.join(c.value for c in OpClass)})"
        ) from None
    ph = _field(d, "phase", str, where)
    try:
        phase = Phase(ph)
    except ValueError:
        raise ProfileError(
            f"{where}: unknown phase {ph!r} (one of {', '.join(p.value for p in Phase)})"
        ) from None
    flops = _nonneg(_field(d, "flops", (int, float), where), "flops", where)
    nbytes = _nonneg(_field(d, "bytes", (int, float), where), "bytes", where)
    shapes = OpShapes()
    if "shapes" in d:
        s = _field(d, "shapes", Mapping, where)
        extra = sorted(set(s) - {"inputs", "output"})
        if extra:
            raise ProfileError(f"{where}.shapes: unknown field {extra[0]!r}")
        ins = s.get("inputs", [])
        if not isinstance(ins, list):
            raise ProfileError(f"{where}.shapes.inputs must be a list of shapes")
        shapes = OpShapes(
            tuple(_shape(x, f"{where}.shapes.inputs[{j}]") for j, x in enumerate(ins)),
            _shape(s.get("output", []), f"{where}.shapes.output"),
        )
    gemm = None
    if "gemm" in d:
        g = _field(d, "gemm", Mapping, where)
        extra = sorted(set(g) - {"m", "n", "k", "batch", "batch_dim"})
        if extra:
            raise ProfileError(f"{where}.gemm: unknown field {extra[0]!r}")
        vals: dict[str, Any] = {}
        bdim = g.get("batch_dim", "m")
        if bdim not in ("m", "k"):
            raise ProfileError(f"{where}.gemm: batch_dim must be 'm' or 'k', got {bdim!r:.40}")
        vals["batch_dim"] = bdim
        for k in ("m", "n", "k", "batch"):
            if k == "batch" and k not in g:
                vals[k] = 1
                continue
            v = _field(g, k, int, f"{where}.gemm")
            if v <= 0:
                raise ProfileError(f"{where}.gemm: {k} must be a positive integer, got {v}")
            vals[k] = v
        gemm = GemmDims(**vals)
    if op_class in (OpClass.GEMM, OpClass.ATTENTION) and gemm is None:
        raise ProfileError(f"{where}: a {op_class.value} operator needs its 'gemm' dimensions")
    swb = d.get("scales_with_batch", True)
    if not isinstance(swb, bool):
        raise ProfileError(f"{where}: scales_with_batch must be true or false, got {swb!r:.60}")
    count = d.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ProfileError(f"{where}: count must be a positive integer, got {count!r:.60}")
    return Operator(
        name=name,
        op=op,
        op_class=op_class,
        phase=phase,
        flops=flops,
        bytes=nbytes,
        shapes=shapes,
        gemm=gemm,
        scales_with_batch=swb,
        count=count,
    )
