"""The operator counting rules every route to an operator profile uses (standard library only).

``op_class`` (an aten operator's name -> its operator class, or None for a view that moves no data),
``gemm_flops``, ``pointwise_flops``, ``conv_gemms`` (a convolution as implicit GEMMs: forward and its two
gradients), ``attention_flops``, ``tensor_bytes``, ``operator_bytes`` (a table lookup's rows) and
``optimizer_operators`` (the update of each parameter tensor). The PyTorch tracer
(``perfmodel.torch_trace``) applies them to the operators it records and the analytic layer tables
(``perfmodel.profile_net``) to the operators they write, so both count alike. The conventions are listed
in docs/profile.md ("What is counted and what is not"). Pure module; it must stay importable by a Python
that has PyTorch but not perfsched's dependencies (the tracer runs there as a script).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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


def operator_bytes(op: str, inputs: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]]) -> float:
    """Bytes an operator moves: every tensor it reads and writes, 4 bytes an element (``tensor_bytes``),
    except a table lookup. ``aten.embedding(table, indices)`` reads the indices and the rows they name and
    writes those rows; its dense backward ``(grad, indices)`` reads the gradient rows and the indices and
    accumulates the rows into the table's gradient. Neither moves the whole table, so the bytes grow with
    the rows looked up (the batch), not with the table's size."""
    n = short_name(op)
    if n == "embedding" and len(inputs) >= 2 and outputs:
        return float(BYTES_PER_ELEMENT * (2 * numel(outputs[0]) + numel(inputs[1])))
    if n == "embedding_dense_backward" and len(inputs) >= 2:
        return float(BYTES_PER_ELEMENT * (2 * numel(inputs[0]) + numel(inputs[1])))
    return tensor_bytes([*inputs, *outputs])


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
