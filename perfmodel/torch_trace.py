"""Operator counting for one training step: the counting rules (stdlib) and a PyTorch tracer (torch).

Two halves in one file, so that the file runs on its own in any Python that has PyTorch
(``python torch_trace.py FILE.py:FACTORY --input-shape 3,224,224 --batch-size 32`` prints the profile
document of docs/profile.md as JSON on stdout; a bad input prints one line on stderr and exits 2):

- The counting rules, stdlib only, shared with the analytic zoo and LLM routes (``perfmodel.profile_net``)
  so that both count alike: ``op_class`` (aten operator -> operator class), ``gemm_flops``,
  ``pointwise_flops``, ``conv_gemms`` (a convolution as implicit GEMMs, forward and its two gradients),
  ``attention_flops`` and ``optimizer_operators`` (the update of each parameter tensor).
- ``trace_step``: builds the module from a factory, moves it to the ``meta`` device (shapes without
  storage: nothing is computed, no weights are read), runs forward, a cross-entropy or mean loss and
  backward under a ``TorchDispatchMode`` that records every aten operator with its shapes, FLOPs and bytes,
  then appends the optimizer operators from the parameter list. Works with PyTorch 1.13 and 2.x.

Counting conventions: one multiply-add = 2 FLOPs; GEMMs count 2 m n k (bias epilogues not counted);
pointwise operators count ``FLOPS_PER_ELEMENT`` (1 unless listed) per output element; reductions and
pooling count one FLOP per input element; bytes are 4 x (every tensor input + every output element), each
operator on its own (no fusion, no cache reuse). Views, aliases and allocations without data are skipped.
Attention kernels count the model FLOPs (4 b h s s' d forward, twice that backward; recomputation of a
flash-style backward is not counted). This module imports only the standard library at import time;
``import torch`` happens inside ``trace_step``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

Shape = tuple[int, ...]
OpDict = dict[str, Any]

BYTES_PER_ELEMENT = 4


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


GEMM_OPS = frozenset(_words("mm addmm bmm baddbmm addbmm matmul linear convolution _convolution"))

ATTENTION_OPS = frozenset(
    _words(
        "_scaled_dot_product_flash_attention _scaled_dot_product_flash_attention_for_cpu "
        "_scaled_dot_product_efficient_attention _scaled_dot_product_cudnn_attention "
        "_flash_attention_forward _efficient_attention_forward"
    )
)

NORMALIZATION_PREFIXES = _words(
    "native_batch_norm _native_batch_norm_legit batch_norm native_layer_norm native_group_norm "
    "_fused_rms_norm rms_norm instance_norm"
)

REDUCTION_PREFIXES = _words(
    "sum mean var std amax amin max min argmax argmin prod norm linalg_vector_norm _softmax "
    "_log_softmax softmax log_softmax nll_loss mse_loss binary_cross_entropy max_pool avg_pool "
    "_adaptive_avg_pool adaptive_avg_pool adaptive_max_pool topk sort cumsum logsumexp"
)

EMBEDDING_PREFIXES = _words(
    "embedding _embedding_bag index_select gather scatter index_add index_put _index_put"
)

MEMORY_OPS = frozenset(
    _words(
        "cat stack clone copy copy_ _to_copy contiguous constant_pad_nd zeros zeros_like ones ones_like "
        "full full_like fill fill_ zero_ new_zeros new_ones new_full index repeat flip roll masked_fill "
        "masked_fill_ _unsafe_index slice_backward select_backward split_with_sizes_copy tril triu arange"
    )
)

SKIPPED_OPS = frozenset(
    _words(
        "view _unsafe_view reshape _reshape_alias t transpose permute expand detach alias as_strided "
        "unsqueeze squeeze slice select split split_with_sizes unbind chunk lift_fresh empty empty_like "
        "empty_strided new_empty new_empty_strided is_same_size _local_scalar_dense sym_size sym_stride "
        "sym_numel view_as_real view_as_complex resize_ set_ unfold diagonal narrow "
        "_has_compatible_shallow_copy_type to lift_fresh_copy"
    )
)

FLOPS_PER_ELEMENT: dict[str, float] = {
    # normalisation: mean, variance, normalise, scale and shift (forward); the backward about twice.
    "native_batch_norm": 5.0,
    "_native_batch_norm_legit": 5.0,
    "_native_batch_norm_legit_functional": 5.0,
    "native_batch_norm_backward": 10.0,
    "native_layer_norm": 5.0,
    "native_layer_norm_backward": 10.0,
    "native_group_norm": 5.0,
    "native_group_norm_backward": 10.0,
    "_fused_rms_norm": 4.0,
    "_fused_rms_norm_backward": 8.0,
    # softmax: max, subtract, exp, sum, divide.
    "_softmax": 5.0,
    "_log_softmax": 5.0,
    "_softmax_backward_data": 4.0,
    "_log_softmax_backward_data": 4.0,
}

ADAM_FLOPS_PER_ELEMENT = 12.0
"""Adam: m, v moving averages (3 + 4), bias correction, sqrt, divide, scaled update (5)."""
ADAMW_FLOPS_PER_ELEMENT = 14.0
"""AdamW: Adam plus the decoupled weight decay (2)."""
SGD_MOMENTUM_FLOPS_PER_ELEMENT = 4.0
"""SGD with momentum: buf = mu buf + g (2), p -= lr buf (2)."""
SGD_FLOPS_PER_ELEMENT = 2.0
"""Plain SGD: p -= lr g."""

OPTIMIZERS: dict[str, tuple[float, int]] = {
    # name: (FLOPs per element, tensors read + written per element: param, grad, states in; param, states out)
    "adamw": (ADAMW_FLOPS_PER_ELEMENT, 7),
    "adam": (ADAM_FLOPS_PER_ELEMENT, 7),
    "sgd-momentum": (SGD_MOMENTUM_FLOPS_PER_ELEMENT, 5),
    "sgd": (SGD_FLOPS_PER_ELEMENT, 3),
}


class TraceError(ValueError):
    """The model cannot be traced (bad file, factory, shape, or an exception in forward); one line."""


def short_name(op: str) -> str:
    """``aten.convolution.default`` / ``aten::convolution`` -> ``convolution``."""
    name = op.replace("::", ".")
    parts = name.split(".")
    if parts[0] in ("aten", "prims", "torch", "ops"):
        parts = parts[1:]
    return parts[0] if parts else name


def op_class(op: str) -> str | None:
    """The operator class of an aten operator (docs/profile.md), or None for a view that moves no data."""
    n = short_name(op)
    if n in SKIPPED_OPS:
        return None
    if n in ("maximum", "minimum", "max_other", "min_other"):
        return "elementwise"
    if n in GEMM_OPS or n.startswith("convolution") or n.startswith("cudnn_convolution"):
        return "gemm"
    if n in ATTENTION_OPS or "attention" in n:
        return "attention"
    if n.startswith(NORMALIZATION_PREFIXES):
        return "normalization"
    if n.startswith(EMBEDDING_PREFIXES):
        return "embedding"
    if n in MEMORY_OPS:
        return "memory"
    if n.startswith(REDUCTION_PREFIXES):
        return "reduction"
    return "elementwise"


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape) if shape else 1


def tensor_bytes(shapes: Sequence[Sequence[int]]) -> float:
    """4 bytes per element of every tensor listed."""
    return float(BYTES_PER_ELEMENT * sum(numel(s) for s in shapes))


def gemm_flops(m: int, n: int, k: int, batch: int = 1) -> float:
    return 2.0 * m * n * k * batch


def pointwise_flops(op: str, inputs: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]]) -> float:
    """FLOPs of a non-GEMM operator: per output element for pointwise and normalisation operators, per
    input element for reductions and pooling, none for memory and embedding operators."""
    cls = op_class(op)
    n = short_name(op)
    out = sum(numel(s) for s in outputs)
    if cls in (None, "memory", "embedding"):
        return 0.0
    if cls == "reduction" and n not in FLOPS_PER_ELEMENT:
        return float(max(sum(numel(s) for s in inputs[:1]), out))
    if cls == "normalization":
        # Per element of the activation (the first input; outputs also hold small per-channel stats).
        return FLOPS_PER_ELEMENT.get(n, 5.0) * numel(inputs[0] if inputs else ())
    return FLOPS_PER_ELEMENT.get(n, 1.0) * out


def conv_gemms(
    input_shape: Shape, weight_shape: Shape, output_shape: Shape, groups: int, transposed: bool = False
) -> dict[str, tuple[int, int, int, int]]:
    """A convolution as implicit GEMMs ``(m, n, k, batch)``: ``forward``, ``grad_input``, ``grad_weight``.

    Forward (not transposed): m = N x output pixels, n = C_out / groups, k = C_in / groups x kernel, one
    product per group. The input gradient is the same product with the roles of input and output swapped;
    the weight gradient reduces over N x output pixels. A transposed convolution is the input gradient of
    the convolution it transposes, so the forward and input-gradient rows swap.
    """
    kernel = numel(weight_shape[2:])
    if transposed:
        # weight [C_in, C_out / groups, k...]: the transposed convolution is the gradient of a convolution
        # from its output (C_out channels) to its input (C_in).
        cin, cout_g = weight_shape[0], weight_shape[1]
        cin_g = cin // groups
        in_pix = input_shape[0] * numel(input_shape[2:])
        # The GEMM over input pixels: 2 x N x input pixels x C_in/g x C_out/g x kernel.
        fwd = (in_pix, cout_g * kernel, cin_g, groups)
        gin = (in_pix, cin_g, cout_g * kernel, groups)
        gw = (cin_g, cout_g * kernel, in_pix, groups)
        return {"forward": fwd, "grad_input": gin, "grad_weight": gw}
    cout, cin_g = weight_shape[0], weight_shape[1]
    cout_g = cout // groups
    out_pix = output_shape[0] * numel(output_shape[2:])
    fwd = (out_pix, cout_g, cin_g * kernel, groups)
    # The input gradient scatters each output pixel's C_out/g values back over C_in/g x kernel inputs:
    # the useful products are those of the forward (zeros a strided convolution interleaves are not counted).
    gin = (out_pix, cin_g * kernel, cout_g, groups)
    gw = (cout_g, cin_g * kernel, out_pix, groups)
    return {"forward": fwd, "grad_input": gin, "grad_weight": gw}


def attention_flops(batch_heads: int, s_q: int, s_kv: int, head_dim: int, backward: bool = False) -> float:
    """Model FLOPs of attention: Q K^T and P V (2 x 2 b h s s' d) forward, twice that backward."""
    f = 4.0 * batch_heads * s_q * s_kv * head_dim
    return 2.0 * f if backward else f


def optimizer_operators(
    params: Sequence[tuple[str, Shape]], optimizer: str, counts: Sequence[int] | None = None
) -> list[OpDict]:
    """One optimizer operator per parameter tensor (profile JSON form), in parameter order."""
    if optimizer not in OPTIMIZERS:
        raise TraceError(f"unknown optimizer {optimizer!r} (one of {', '.join(OPTIMIZERS)})")
    fpe, tensors = OPTIMIZERS[optimizer]
    ops = []
    for i, (name, shape) in enumerate(params):
        n = numel(shape)
        ops.append(
            {
                "name": f"{name}.{optimizer}",
                "op": f"optim.{optimizer}",
                "class": "optimizer",
                "phase": "optimizer",
                "shapes": {"inputs": [list(shape)], "output": list(shape)},
                "flops": fpe * n,
                "bytes": float(BYTES_PER_ELEMENT * tensors * n),
                "scales_with_batch": False,
                "count": counts[i] if counts is not None else 1,
            }
        )
    return ops


# ---------------------------------------------------------------- the PyTorch tracer


def load_factory(spec: str) -> Callable[[], Any]:
    """``FILE.py:FACTORY`` -> the callable (the file is imported as a module of its own)."""
    if ":" not in spec:
        raise TraceError(f"--torch {spec!r}: expected FILE.py:FACTORY")
    path, _, attr = spec.rpartition(":")
    if not path or not attr:
        raise TraceError(f"--torch {spec!r}: expected FILE.py:FACTORY")
    mod_spec = importlib.util.spec_from_file_location("perfsched_profiled_model", path)
    if mod_spec is None or mod_spec.loader is None:
        raise TraceError(f"--torch {spec!r}: cannot load {path} as a Python file")
    try:
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    except FileNotFoundError:
        raise TraceError(f"--torch {spec!r}: file {path} does not exist") from None
    except Exception as exc:  # the user's file: any error is reported, not raised
        raise TraceError(f"--torch {spec!r}: importing {path} failed: {type(exc).__name__}: {exc}") from None
    factory = getattr(module, attr, None)
    if factory is None or not callable(factory):
        raise TraceError(f"--torch {spec!r}: {path} has no callable {attr!r}")
    return factory  # type: ignore[no-any-return]


def trace_step(
    spec: str,
    input_shape: Sequence[int],
    batch_size: int,
    optimizer: str = "adamw",
    num_classes: int | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """Trace one training step of the module ``FILE.py:FACTORY`` builds; the profile JSON document."""
    import torch

    return _Tracer(torch).run(spec, tuple(input_shape), batch_size, optimizer, name)


class _Tracer:
    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.ops: list[OpDict] = []
        self.phase = "forward"
        self.module_stack: list[str] = []
        self.param_module: dict[int, str] = {}
        self.pending: list[OpDict] = []
        self.unowned = False
        self.keep: list[Any] = []
        self.shape_owner: dict[Shape, str] = {}
        self.param_shapes: set[Shape] = set()
        self.param_ids: set[int] = set()
        self.batch = 0

    def run(
        self, spec: str, input_shape: Shape, batch: int, optimizer: str, name: str | None
    ) -> dict[str, Any]:
        torch = self.torch
        if batch <= 0:
            raise TraceError(f"--batch-size must be a positive integer, got {batch}")
        if not input_shape or any(d <= 0 for d in input_shape):
            raise TraceError(f"--input-shape must be positive integers, got {list(input_shape)}")
        if optimizer not in OPTIMIZERS:
            raise TraceError(f"unknown optimizer {optimizer!r} (one of {', '.join(OPTIMIZERS)})")
        self.batch = batch
        factory = load_factory(spec)
        try:
            model = factory()
        except Exception as exc:
            raise TraceError(f"--torch {spec!r}: the factory raised {type(exc).__name__}: {exc}") from None
        if not isinstance(model, torch.nn.Module):
            raise TraceError(
                f"--torch {spec!r}: the factory returned {type(model).__name__}, not an nn.Module"
            )
        try:
            model = model.to("meta")
        except Exception as exc:
            raise TraceError(
                f"--torch {spec!r}: moving the module to the meta device failed: {exc}"
            ) from None
        model.train()
        params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self.param_ids = {id(p) for _, p in params}
        hooks = self._install_hooks(model)
        try:
            self._step(model, spec, input_shape, batch)
        finally:
            for h in hooks:
                h.remove()
        ops = self.ops + optimizer_operators([(n, tuple(p.shape)) for n, p in params], optimizer)
        total = math.fsum(o["flops"] * o["count"] for o in ops)
        n_params = sum(p.numel() for _, p in model.named_parameters())
        dtypes: dict[str, int] = {}
        for _, p in model.named_parameters():
            key = str(p.dtype).replace("torch.", "")
            dtypes[key] = dtypes.get(key, 0) + p.numel() * p.element_size()
        attr = spec.rpartition(":")[2]
        return {
            "schema_version": 1,
            "model": {"name": name or attr, "source": "torch", "parameters": int(n_params)},
            "batch_size": batch,
            "sample": {"input_shape": list(input_shape)},
            "operators": ops,
            "train_flops_per_sample": total / batch,
            "param_bytes_by_dtype": dtypes,
        }

    def _install_hooks(self, model: Any) -> list[Any]:
        hooks = []
        seen: dict[Shape, list[str]] = {}
        for mname, mod in model.named_modules():
            for p in mod.parameters(recurse=False):
                self.param_module[id(p)] = mname
                shape = tuple(int(d) for d in p.shape)
                if len(shape) >= 2:
                    for sh in {shape, shape[::-1]}:
                        seen.setdefault(sh, []).append(mname)
        self.shape_owner = {sh: names[0] for sh, names in seen.items() if len(set(names)) == 1}
        self.param_shapes = {tuple(int(d) for d in p.shape) for p in model.parameters()}
        self.param_shapes |= {s[::-1] for s in self.param_shapes if len(s) == 2}
        for mname, mod in model.named_modules():
            if not mname:
                continue

            def pre(_m: Any, _a: Any, mname: str = mname) -> None:
                self.module_stack.append(mname)

            def post(_m: Any, _a: Any, _out: Any, mname: str = mname) -> None:
                if self.module_stack and self.module_stack[-1] == mname:
                    self.module_stack.pop()

            hooks.append(mod.register_forward_pre_hook(pre))
            hooks.append(mod.register_forward_hook(post))
        return hooks

    def _step(self, model: Any, spec: str, input_shape: Shape, batch: int) -> None:
        torch = self.torch
        from torch.utils._python_dispatch import TorchDispatchMode

        tracer = self

        class Mode(TorchDispatchMode):  # type: ignore[misc]
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                try:
                    out = func(*args, **(kwargs or {}))
                except (NotImplementedError, RuntimeError) as exc:
                    out = tracer.meta_fallback(func, args, exc)
                tracer.record(func, args, kwargs or {}, out)
                return out

        x = torch.empty((batch, *input_shape), device="meta")
        with Mode():
            try:
                y = model(x)
            except TraceError:
                raise
            except Exception as exc:
                raise TraceError(
                    f"--torch {spec!r}: forward at input shape {[batch, *input_shape]} failed: "
                    f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                ) from None
            if isinstance(y, (tuple, list)):
                y = y[0]
            if isinstance(y, dict):
                y = next(iter(y.values()))
            if not isinstance(y, torch.Tensor) or not y.is_floating_point():
                raise TraceError(f"--torch {spec!r}: forward must return a floating-point tensor")
            self.module_stack = ["loss"]
            if y.dim() == 2:
                target = torch.zeros(y.shape[0], dtype=torch.long, device="meta")
                loss = torch.nn.functional.cross_entropy(y, target)
            else:
                loss = y.float().mean()
            self.module_stack = []
            self.phase = "backward"
            try:
                loss.backward()
            except TraceError:
                raise
            except Exception as exc:
                raise TraceError(
                    f"--torch {spec!r}: backward failed: {type(exc).__name__}: "
                    f"{str(exc).splitlines()[0] if str(exc) else ''}"
                ) from None

    def meta_fallback(self, func: Any, args: Any, exc: BaseException) -> Any:
        """Outputs of a backward operator PyTorch has no meta kernel for (convolution_backward and others
        in 1.13): empty meta tensors shaped like the inputs they are the gradients of."""
        torch = self.torch
        n = short_name(str(func.name()) if hasattr(func, "name") else str(func))

        def like(t: Any) -> Any:
            return None if t is None else torch.empty(t.shape, dtype=t.dtype, device="meta")

        def masked(outs: list[Any], mask: Any) -> tuple[Any, ...]:
            return tuple(o if m else None for o, m in zip(outs, list(mask), strict=False))

        if n == "convolution_backward":
            w = args[2]
            c = w.shape[1] * int(args[9]) if bool(args[7]) else w.shape[0]
            bias = torch.empty((c,), dtype=w.dtype, device="meta")
            return masked([like(args[1]), like(w), bias], args[10])
        if n == "native_batch_norm_backward":
            return masked([like(args[1]), like(args[2]), like(args[2])], args[9])
        if n == "native_layer_norm_backward":
            return masked([like(args[1]), like(args[5]), like(args[6])], args[7])
        if n == "native_group_norm_backward":
            return masked([like(args[1]), like(args[4]), like(args[4])], args[9])
        if n == "embedding_dense_backward":
            return torch.empty((int(args[2]), args[0].shape[-1]), dtype=args[0].dtype, device="meta")
        if n.endswith("_backward") and len(args) > 1 and isinstance(args[1], torch.Tensor):
            # pooling, losses, upsampling by size: the gradient is shaped like the forward input (args[1]).
            if "upsample" in n:
                return torch.empty(tuple(args[2]), dtype=args[0].dtype, device="meta")
            return like(args[1])
        if n.endswith("_backward") and args and isinstance(args[0], torch.Tensor):
            return like(args[0])
        if isinstance(exc, NotImplementedError):
            raise TraceError(
                f"operator aten.{n} has no meta kernel in PyTorch {torch.__version__}; "
                "a newer PyTorch may trace this model"
            ) from None
        raise exc

    def _shapes(self, obj: Any) -> list[Shape]:
        torch = self.torch
        found: list[Shape] = []

        def walk(o: Any) -> None:
            if isinstance(o, torch.Tensor):
                found.append(tuple(int(d) for d in o.shape))
            elif isinstance(o, (tuple, list)):
                for e in o:
                    walk(e)

        walk(obj)
        return found

    def record(self, func: Any, args: Any, kwargs: dict[str, Any], out: Any) -> None:
        opname = str(func.name()) if hasattr(func, "name") else str(func)
        full = "aten." + short_name(opname)
        cls = op_class(opname)
        torch = self.torch
        n = short_name(opname)
        tensors = [a for a in _flatten([args, kwargs]) if isinstance(a, torch.Tensor)]
        owner = next((self.param_module[id(t)] for t in tensors if id(t) in self.param_module), None)
        scales = not (tensors and all(id(t) in self.param_ids for t in tensors))
        if not scales:
            # A weight-only result (a view, a cast, a transposed copy of a weight) is weight-only downstream
            # and belongs to the weight's module.
            for t in _flatten(out):
                if isinstance(t, torch.Tensor):
                    self.keep.append(t)  # alive, so that its id() is not reused by another tensor
                    self.param_ids.add(id(t))
                    if owner is not None:
                        self.param_module[id(t)] = owner
        if cls is None:
            return
        ins = self._shapes(list(args) + list(kwargs.values()))
        outs = self._shapes(out)
        if not outs and not ins:
            return
        where = self.module_stack[-1] if self.phase == "forward" and self.module_stack else ""
        if self.phase == "backward":
            # Autograd runs a layer's weight gradient right after the pointwise gradients of what followed
            # the layer in forward order: those wait and take the name of the next weight-using operator.
            if owner is None:  # a saved weight autograd unpacked as a new tensor: known by its shape
                owner = next((self.shape_owner[sh] for sh in ins + outs if sh in self.shape_owner), None)
            where = owner or ""
            self.unowned = owner is None
            if owner is not None:
                for d in self.pending:
                    d["name"] = f"{owner}.{d['name']}"
                self.pending = []
        base = f"{where}.{n}" if where else n
        if n.startswith("convolution_backward"):
            self._conv_backward(base, args, ins, outs, scales)
            return
        if cls == "gemm":
            self._gemm(full, base, n, args, ins, outs, scales)
            return
        if cls == "attention":
            backward = "backward" in n
            # forward (query, key, value, ...); backward (grad_out, query, key, value, ...)
            q, k = (ins[1], ins[2]) if backward and len(ins) > 2 else (ins[0], ins[1])
            bh = numel(q[:-2])
            flops = attention_flops(bh, q[-2], k[-2], q[-1], backward=backward)
            gemm = {"m": q[-2], "n": k[-2], "k": q[-1], "batch": bh}
            self._add(full, base, cls, ins, outs, flops, scales, gemm)
            return
        self._add(
            full,
            base,
            cls,
            ins,
            outs[:1] if cls == "normalization" else outs,
            pointwise_flops(n, ins, outs),
            scales,
        )

    def _gemm(
        self, full: str, base: str, n: str, args: Any, ins: list[Shape], outs: list[Shape], scales: bool
    ) -> None:
        if n.startswith("convolution") or n == "_convolution":
            inp, w = ins[0], ins[1]
            transposed = bool(args[6]) if len(args) > 6 else False
            groups = int(args[8]) if len(args) > 8 else 1
            m, nn, k, b = conv_gemms(inp, w, outs[0], groups, transposed)["forward"]
        else:
            a, bs = (ins[1], ins[2]) if n in ("addmm", "baddbmm", "addbmm") else (ins[0], ins[1])
            if n in ("bmm", "baddbmm", "addbmm"):
                b, m, k, nn = a[0], a[1], a[2], bs[2]
            else:
                b, m, k, nn = 1, numel(a[:-1]), a[-1], bs[-1]
        self._add(
            full,
            base,
            "gemm",
            ins,
            outs,
            gemm_flops(m, nn, k, b),
            scales,
            {"m": m, "n": nn, "k": k, "batch": b},
        )

    def _conv_backward(self, base: str, args: Any, ins: list[Shape], outs: list[Shape], scales: bool) -> None:
        grad_out, inp, w = ins[0], ins[1], ins[2]
        transposed = bool(args[7]) if len(args) > 7 else False
        groups = int(args[9]) if len(args) > 9 else 1
        mask = list(args[10]) if len(args) > 10 else [True, True, True]
        g = conv_gemms(inp, w, grad_out, groups, transposed)
        if mask[0]:
            m, n, k, b = g["grad_input"]
            self._add(
                "aten.convolution_backward",
                base + ".grad_input",
                "gemm",
                [grad_out, w],
                [inp],
                gemm_flops(m, n, k, b),
                True,
                {"m": m, "n": n, "k": k, "batch": b},
            )
        if mask[1]:
            m, n, k, b = g["grad_weight"]
            self._add(
                "aten.convolution_backward",
                base + ".grad_weight",
                "gemm",
                [grad_out, inp],
                [w],
                gemm_flops(m, n, k, b),
                True,
                {"m": m, "n": n, "k": k, "batch": b},
            )
        if len(mask) > 2 and mask[2]:
            self._add(
                "aten.convolution_backward",
                base + ".grad_bias",
                "reduction",
                [grad_out],
                [(w[1] * groups if transposed else w[0],)],
                float(numel(grad_out)),
                True,
            )

    def _add(
        self,
        op: str,
        name: str,
        cls: str,
        ins: list[Shape],
        outs: list[Shape],
        flops: float,
        scales: bool,
        gemm: dict[str, int] | None = None,
    ) -> None:
        d: OpDict = {
            "name": name,
            "op": op,
            "class": cls,
            "phase": self.phase,
            "shapes": {"inputs": [list(s) for s in ins], "output": list(outs[0]) if outs else []},
        }
        if gemm is not None:
            d["gemm"] = dict(gemm)
            # A weight gradient (its output shaped like a parameter) reduces over the batch: k grows with it.
            if self.phase == "backward" and outs and outs[0] in self.param_shapes and cls == "gemm":
                d["gemm"]["batch_dim"] = "k"
        d.update(flops=float(flops), bytes=tensor_bytes(ins + outs), scales_with_batch=scales, count=1)
        if self.phase == "backward" and self.unowned:
            self.pending.append(d)
        self.ops.append(d)


def _flatten(obj: Any) -> list[Any]:
    if isinstance(obj, (tuple, list)):
        out: list[Any] = []
        for o in obj:
            out.extend(_flatten(o))
        return out
    if isinstance(obj, dict):
        return _flatten(list(obj.values()))
    return [obj]


def main(argv: Sequence[str]) -> int:
    """``torch_trace.py FILE.py:FACTORY --input-shape C,H,W --batch-size B [--optimizer O] [--name N]``."""
    import argparse

    ap = argparse.ArgumentParser(prog="torch_trace.py", description=main.__doc__)
    ap.add_argument("spec")
    ap.add_argument("--input-shape", required=True)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--name", default=None)
    a = ap.parse_args(argv)
    try:
        try:
            shape = [int(s) for s in a.input_shape.split(",") if s.strip()]
        except ValueError:
            raise TraceError(f"--input-shape {a.input_shape!r}: expected integers like 3,224,224") from None
        doc = trace_step(a.spec, shape, a.batch_size, a.optimizer, name=a.name)
    except TraceError as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    json.dump(doc, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
