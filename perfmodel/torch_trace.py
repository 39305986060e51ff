"""A PyTorch tracer: one training step of an ``nn.Module`` as the operators it runs (docs/profile.md).

``trace_step`` builds the module from a factory (``FILE.py:FACTORY``), moves it to the ``meta`` device
(shapes without storage: nothing is computed, no weights are read), runs forward, a cross-entropy or mean
loss and backward under a ``TorchDispatchMode`` that records every aten operator with its shapes, FLOPs
and bytes (the rules of ``perfmodel.opcount``), then appends the optimizer's operators from the
parameter list. Works with PyTorch 1.13 and 2.x; backward operators 1.13 has no meta kernel for get
outputs shaped like the inputs they are gradients of.

The file also runs on its own in any Python that has PyTorch, which is how ``perfsched profile --torch``
uses it when perfsched's own Python has none: ``python torch_trace.py FILE.py:FACTORY --input-shape
3,224,224 --batch-size 32`` prints the profile document as JSON on stdout, or one line on stderr and exit
status 2. It imports the standard library and ``perfmodel.opcount`` at import time, PyTorch only inside
``trace_step``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:
    # Run by path: import perfmodel.opcount from the directory that holds perfmodel/, and keep perfmodel/
    # itself off the path (its profile.py would shadow the standard library's profile module).
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from perfmodel.opcount import (
    OPTIMIZERS,
    OpDict,
    Shape,
    TraceError,
    attention_flops,
    conv_gemms,
    gemm_flops,
    numel,
    op_class,
    operator_bytes,
    optimizer_operators,
    pointwise_flops,
    short_name,
)

__all__ = ["OPTIMIZERS", "TraceError", "load_factory", "main", "trace_step"]


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
        d.update(flops=float(flops), bytes=operator_bytes(op, ins, outs), scales_with_batch=scales, count=1)
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
