"""A layer-table builder that counts one training step analytically (no PyTorch needed).

``Net`` is written like a model's ``forward``: each call (``conv``, ``bn``, ``act``, ``linear``,
``attention`` ...) takes activation shapes and returns the output's, records the forward operator and the
backward operators autograd would run for it (input gradient only when the input needs one, weight and
bias gradients), and registers the layer's parameters; the bookkeeping (scopes, ``repeat(n)``, ``finish``
into an ``OperatorProfile``) is ``perfmodel.profile_record.OpRecorder``'s. The FLOP and byte rules
are ``perfmodel.opcount``'s, which the PyTorch tracer applies too, so an analytic profile and a traced
one of the same model agree. Pure module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from perfmodel.opcount import (
    attention_flops,
    conv_gemms,
    gemm_flops,
    numel,
    pointwise_flops,
)
from perfmodel.profile_record import OpRecorder, Shape, T


def _conv_out(size: int, k: int, s: int, p: int, d: int = 1) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


class Net(OpRecorder):
    """Records the operators of one training step, layer by layer (module docstring)."""

    # ------------------------------------------------------------ layers

    def input(self, shape: Sequence[int]) -> T:
        return T((self.batch, *shape), grad=False)

    def conv(
        self,
        x: T,
        cout: int,
        k: int | tuple[int, int],
        s: int | tuple[int, int] = 1,
        p: int | tuple[int, int] | None = None,
        groups: int = 1,
        bias: bool = False,
        name: str = "conv",
        transposed: bool = False,
        output_padding: int = 0,
    ) -> T:
        kh, kw = (k, k) if isinstance(k, int) else k
        sh, sw = (s, s) if isinstance(s, int) else s
        if p is None:
            p = (kh // 2, kw // 2)
        ph, pw = (p, p) if isinstance(p, int) else p
        n, cin, h, w = x.shape
        if transposed:
            ho = (h - 1) * sh - 2 * ph + kh + output_padding
            wo = (w - 1) * sw - 2 * pw + kw + output_padding
            wshape: Shape = (cin, cout // groups, kh, kw)
        else:
            ho, wo = _conv_out(h, kh, sh, ph), _conv_out(w, kw, sw, pw)
            wshape = (cout, cin // groups, kh, kw)
        out: Shape = (n, cout, ho, wo)
        path = self._path(name)
        with self.scope(name):
            self.param("weight", wshape)
            if bias:
                self.param("bias", (cout,))
        g = conv_gemms(x.shape, wshape, out, groups, transposed)
        ins = [x.shape, wshape, *([(cout,)] if bias else [])]
        fwd = self._op(
            path, "aten.convolution", "gemm", ins, out, gemm_flops(*g["forward"]), "forward", g["forward"]
        )
        bwd = []
        if x.grad:
            bwd.append(
                self._op(
                    path + ".grad_input",
                    "aten.convolution_backward",
                    "gemm",
                    [out, wshape],
                    x.shape,
                    gemm_flops(*g["grad_input"]),
                    "backward",
                    g["grad_input"],
                )
            )
        bwd.append(
            self._op(
                path + ".grad_weight",
                "aten.convolution_backward",
                "gemm",
                [out, x.shape],
                wshape,
                gemm_flops(*g["grad_weight"]),
                "backward",
                g["grad_weight"],
            )
        )
        if bias:
            bwd.append(
                self._op(
                    path + ".grad_bias",
                    "aten.convolution_backward",
                    "reduction",
                    [out],
                    (cout,),
                    numel(out),
                    "backward",
                )
            )
        self._emit(fwd, bwd)
        return T(out)

    def norm(
        self, x: T, kind: str = "batch", name: str = "bn", affine: bool = True, channels_dim: int = 1
    ) -> T:
        """Batch, layer, group, instance or RMS normalisation (one fused operator each way)."""
        c = x.shape[channels_dim] if kind in ("batch", "instance", "group") else x.shape[-1]
        op = {
            "batch": "native_batch_norm",
            "instance": "native_batch_norm",
            "group": "native_group_norm",
            "layer": "native_layer_norm",
            "rms": "_fused_rms_norm",
        }[kind]
        path = self._path(name)
        pshapes: list[Shape] = []
        if affine:
            with self.scope(name):
                pshapes.append(self.param("weight", (c,)))
                if kind != "rms":
                    pshapes.append(self.param("bias", (c,)))
        ins = [x.shape, *pshapes]
        fwd = self._op(
            path,
            f"aten.{op}",
            "normalization",
            ins,
            x.shape,
            pointwise_flops(op, ins, [x.shape]),
            "forward",
            extra_out=[(c,), (c,)],
        )
        bins = [x.shape, x.shape, *pshapes]
        bwd = [
            self._op(
                path + ".backward",
                f"aten.{op}_backward",
                "normalization",
                bins,
                x.shape,
                pointwise_flops(op + "_backward", bins, [x.shape]),
                "backward",
                extra_out=pshapes,
            )
        ]
        self._emit(fwd, bwd if (x.grad or affine) else [])
        return T(x.shape, x.grad or affine)

    def bn(self, x: T, name: str = "bn") -> T:
        return self.norm(x, "batch", name)

    def act(self, x: T, kind: str = "relu", name: str = "") -> T:
        """A pointwise activation (relu, gelu, silu, tanh, sigmoid, elu, leaky_relu, hardtanh, ...)."""
        path = self._path(name or kind)
        fwd = self._op(path, f"aten.{kind}", "elementwise", [x.shape], x.shape, numel(x.shape), "forward")
        back = "threshold_backward" if kind == "relu" else f"{kind}_backward"
        bwd = [
            self._op(
                path + ".backward",
                f"aten.{back}",
                "elementwise",
                [x.shape, x.shape],
                x.shape,
                numel(x.shape),
                "backward",
            )
        ]
        self._emit(fwd, bwd if x.grad else [])
        return T(x.shape, x.grad)

    def pointwise(
        self, xs: Sequence[T], op: str = "add", name: str = "", flops_per_element: float = 1.0
    ) -> T:
        """A pointwise binary operator; its backward is one pointwise operator per input needing a gradient
        (for ``add``: the gradient accumulation where the input was used twice)."""
        out = max((x.shape for x in xs), key=numel)
        path = self._path(name or op)
        flops = flops_per_element * numel(out)
        fwd = self._op(path, f"aten.{op}", "elementwise", [x.shape for x in xs], out, flops, "forward")
        bwd = [
            self._op(
                f"{path}.backward#{i}" if i else path + ".backward",
                f"aten.{op}",
                "elementwise",
                [out, x.shape],
                x.shape,
                flops,
                "backward",
            )
            for i, x in enumerate(xs)
            if x.grad
        ]
        self._emit(fwd, bwd)
        return T(out, any(x.grad for x in xs))

    def add(self, a: T, b: T, name: str = "add") -> T:
        return self.pointwise([a, b], "add", name)

    def pool(self, x: T, k: int, s: int | None = None, p: int = 0, kind: str = "max", name: str = "") -> T:
        s = s or k
        n, c, h, w = x.shape
        out: Shape = (n, c, _conv_out(h, k, s, p), _conv_out(w, k, s, p))
        return self.reduce(
            x, out, f"{kind}_pool2d" + ("_with_indices" if kind == "max" else ""), name or f"{kind}pool"
        )

    def global_pool(self, x: T, name: str = "avgpool") -> T:
        return self.reduce(x, (*x.shape[:2], 1, 1), "_adaptive_avg_pool2d", name)

    def flatten(self, x: T) -> T:
        return T((x.shape[0], numel(x.shape[1:])), x.grad)

    def reshape(self, x: T, shape: Shape) -> T:
        if numel(shape) != numel(x.shape):
            raise ValueError(f"reshape {x.shape} -> {shape} changes the element count")
        return T(shape, x.grad)

    def reduce(self, x: T, out: Shape, op: str, name: str) -> T:
        """A reduction (pooling, mean, a loss) of ``x`` to shape ``out``; backward spreads it back."""
        path = self._path(name)
        fwd = self._op(
            path, f"aten.{op}", "reduction", [x.shape], out, pointwise_flops(op, [x.shape], [out]), "forward"
        )
        bop = op + "_backward"
        bwd = [
            self._op(
                path + ".backward",
                f"aten.{bop}",
                "reduction",
                [out, x.shape],
                x.shape,
                pointwise_flops(bop, [out], [x.shape]),
                "backward",
            )
        ]
        self._emit(fwd, bwd if x.grad else [])
        return T(out, x.grad)

    def cat(self, xs: Sequence[T], dim: int = 1, name: str = "cat") -> T:
        shape = list(xs[0].shape)
        shape[dim] = sum(x.shape[dim] for x in xs)
        out = tuple(shape)
        self._emit(
            self._op(self._path(name), "aten.cat", "memory", [x.shape for x in xs], out, 0.0, "forward"), []
        )
        return T(out, any(x.grad for x in xs))

    def copy(self, x: T, name: str = "copy", out: Shape | None = None) -> T:
        """A data-moving operator (a transpose made contiguous, a channel shuffle); backward moves it back."""
        shape = out or x.shape
        path = self._path(name)
        fwd = self._op(path, "aten.clone", "memory", [x.shape], shape, 0.0, "forward")
        bwd = [self._op(path + ".backward", "aten.clone", "memory", [shape], x.shape, 0.0, "backward")]
        self._emit(fwd, bwd if x.grad else [])
        return T(shape, x.grad)

    def dropout(self, x: T, name: str = "dropout") -> T:
        return self.act(x, "native_dropout", name)

    def linear(self, x: T, out: int, bias: bool = True, name: str = "fc", tied: bool = False) -> T:
        """``x @ W^T + b`` over every leading position (tokens x batch); ``tied`` reuses a registered
        weight (no new parameter, its gradient still computed)."""
        cin = x.shape[-1]
        m = numel(x.shape[:-1])
        oshape: Shape = (*x.shape[:-1], out)
        wshape: Shape = (out, cin)
        path = self._path(name)
        with self.scope(name):
            if not tied:
                self.param("weight", wshape)
            if bias:
                self.param("bias", (out,))
        op = "aten.addmm" if bias else "aten.mm"
        ins = [*([(out,)] if bias else []), (m, cin), (cin, out)]
        fwd = self._op(path, op, "gemm", ins, (m, out), gemm_flops(m, out, cin), "forward", (m, out, cin, 1))
        bwd = []
        if x.grad:
            bwd.append(
                self._op(
                    path + ".grad_input",
                    "aten.mm",
                    "gemm",
                    [(m, out), (out, cin)],
                    (m, cin),
                    gemm_flops(m, cin, out),
                    "backward",
                    (m, cin, out, 1),
                )
            )
        bwd.append(
            self._op(
                path + ".grad_weight",
                "aten.mm",
                "gemm",
                [(out, m), (m, cin)],
                (out, cin),
                gemm_flops(out, cin, m),
                "backward",
                (out, cin, m, 1),
            )
        )
        if bias:
            bwd.append(
                self._op(
                    path + ".grad_bias", "aten.sum", "reduction", [(m, out)], (out,), m * out, "backward"
                )
            )
        self._emit(fwd, bwd)
        return T(oshape)

    def experts(self, x: T, ffn: int, experts: int, top_k: int, gated: bool, name: str = "experts") -> T:
        """A mixture-of-experts MLP: each token goes through ``top_k`` of ``experts`` MLPs (grouped GEMMs)."""
        h = x.shape[-1]
        tokens = numel(x.shape[:-1])
        routed = tokens * top_k
        per = max(1, math.ceil(routed / experts))
        mats = [("gate_proj", h, ffn), ("up_proj", h, ffn)] if gated else [("up_proj", h, ffn)]
        mats.append(("down_proj", ffn, h))
        with self.scope(name):
            for mname, cin, cout in mats:
                path = self._path(mname)
                self.param(mname, (experts, cout, cin))
                f = gemm_flops(routed, cout, cin)
                fwd = self._op(
                    path,
                    "aten.bmm",
                    "gemm",
                    [(experts, per, cin), (experts, cin, cout)],
                    (experts, per, cout),
                    f,
                    "forward",
                    (per, cout, cin, experts),
                )
                bwd = [
                    self._op(
                        path + ".grad_input",
                        "aten.bmm",
                        "gemm",
                        [(experts, per, cout), (experts, cout, cin)],
                        (experts, per, cin),
                        f,
                        "backward",
                        (per, cin, cout, experts),
                    ),
                    self._op(
                        path + ".grad_weight",
                        "aten.bmm",
                        "gemm",
                        [(experts, cout, per), (experts, per, cin)],
                        (experts, cout, cin),
                        f,
                        "backward",
                        (cout, cin, per, experts),
                    ),
                ]
                self._emit(fwd, bwd)
                if mname == "up_proj":
                    act = T((routed, ffn))
                    if gated:
                        self.act(act, "silu")
                        self.pointwise([act, act], "mul", "gate_mul")
                    else:
                        self.act(act, "gelu")
        return T(x.shape)

    def attention(
        self, q: T, kv_len: int, heads: int, kv_heads: int, head_dim: int, name: str = "attention"
    ) -> T:
        """A fused (flash-style) attention over ``q`` of shape (batch, seq, heads x head_dim)."""
        b, s = q.shape[0], q.shape[1]
        qs: Shape = (b, heads, s, head_dim)
        ks: Shape = (b, kv_heads, kv_len, head_dim)
        path = self._path(name)
        dims = (s, kv_len, head_dim, b * heads)
        f = attention_flops(b * heads, s, kv_len, head_dim)
        fwd = self._op(
            path,
            "aten._scaled_dot_product_flash_attention",
            "attention",
            [qs, ks, ks],
            qs,
            f,
            "forward",
            dims,
        )
        bwd = [
            self._op(
                path + ".backward",
                "aten._scaled_dot_product_flash_attention_backward",
                "attention",
                [qs, qs, ks, ks, qs],
                qs,
                attention_flops(b * heads, s, kv_len, head_dim, backward=True),
                "backward",
                dims,
                extra_out=[ks, ks],
            )
        ]
        self._emit(fwd, bwd)
        return T(q.shape)

    def embedding(
        self, tokens: Shape, vocab: int, dim: int, name: str = "embed_tokens", tied: bool = False
    ) -> T:
        """A table lookup (``tied``: the table is one registered before)."""
        path = self._path(name)
        if not tied:
            with self.scope(name):
                self.param("weight", (vocab, dim))
        out: Shape = (*tokens, dim)
        fwd = self._op(path, "aten.embedding", "embedding", [(vocab, dim), tokens], out, 0.0, "forward")
        bwd = [
            self._op(
                path + ".backward",
                "aten.embedding_dense_backward",
                "embedding",
                [out, tokens],
                (vocab, dim),
                0.0,
                "backward",
            )
        ]
        self._emit(fwd, bwd)
        return T(out)

    def cross_entropy(self, logits: T, name: str = "loss") -> None:
        """Log-softmax and NLL over the last dimension (the classifier's or the LM head's)."""
        x = T((numel(logits.shape[:-1]), logits.shape[-1]), logits.grad)
        n = x.shape[0]
        with self.scope(name):
            lp = self._path("log_softmax")
            fwd = self._op(
                lp,
                "aten._log_softmax",
                "reduction",
                [x.shape],
                x.shape,
                pointwise_flops("_log_softmax", [x.shape], [x.shape]),
                "forward",
            )
            bwd = [
                self._op(
                    lp + ".backward",
                    "aten._log_softmax_backward_data",
                    "reduction",
                    [x.shape, x.shape],
                    x.shape,
                    pointwise_flops("_log_softmax_backward_data", [x.shape], [x.shape]),
                    "backward",
                )
            ]
            self._emit(fwd, bwd)
            nl = self._path("nll")
            fwd = self._op(
                nl,
                "aten.nll_loss_forward",
                "reduction",
                [x.shape, (n,)],
                (),
                pointwise_flops("nll_loss_forward", [x.shape], [()]),
                "forward",
            )
            bwd = [
                self._op(
                    nl + ".backward",
                    "aten.nll_loss_backward",
                    "reduction",
                    [(), x.shape, (n,)],
                    x.shape,
                    pointwise_flops("nll_loss_backward", [()], [x.shape]),
                    "backward",
                )
            ]
            self._emit(fwd, bwd)
