"""Transformer operator profiles: decoder LLMs (from a zoo entry or a HuggingFace config.json), BERT-style
encoders and the encoder-decoder Transformer, built on ``profile_net.Net``.

A layer is: norm, Q/K/V projections (K and V at the KV-head width), rotary embedding (decoder LLMs), one
fused attention operator (flash-style; its FLOPs are the model FLOPs 4 b h s^2 d forward, causal masking
not subtracted, as in the zoo's convention), output projection, residual add, norm, MLP (gated SwiGLU:
gate, up, SiLU x up, down; else up, GeLU, down) or a mixture of experts (router, softmax/top-k, grouped
expert GEMMs over the routed tokens), residual add. Identical layers are stored once with
``count = layers``. ``TransformerSpec.from_config`` reads a HuggingFace config.json (or the short keys
``layers, hidden, heads, kv_heads, ffn, vocab, sequence_length, experts, top_k``); a missing key raises a
``ProfileError`` naming it. Pure module.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfmodel.errors import ProfileError
from perfmodel.profile import OperatorProfile, Sample, Source
from perfmodel.profile_net import Net
from perfmodel.profile_record import T
from perfmodel.zoo import LLMArch


@dataclass(frozen=True, slots=True)
class TransformerSpec:
    """A transformer's shape: what the profile needs from a config.json."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    sequence_length: int
    gated_mlp: bool = True
    experts: int = 1
    top_k: int = 1
    tied_embeddings: bool = False
    norm: str = "rms"
    qkv_bias: bool = False
    linear_bias: bool = False
    rotary: bool = True
    causal: bool = True
    head: str = "lm"  # lm: vocabulary projection; qa: start/end logits (BERT on SQuAD)
    positions: int = 0  # learned position embeddings (GPT-2, BERT); 0 with rotary
    head_size: int = 0  # a config's explicit head_dim (Gemma, Qwen3); 0: hidden / heads

    @property
    def head_dim(self) -> int:
        return self.head_size or self.hidden // self.heads

    @classmethod
    def from_arch(cls, arch: LLMArch, sequence_length: int | None = None) -> TransformerSpec:
        """The spec of a zoo LLM (``perfmodel.zoo.LLMArch``)."""
        return cls(
            layers=arch.layers,
            hidden=arch.hidden,
            heads=arch.heads,
            kv_heads=arch.kv_heads,
            ffn=arch.ffn,
            vocab=arch.vocab,
            sequence_length=sequence_length or arch.default_sequence,
            gated_mlp=arch.gated_mlp,
            experts=arch.experts,
            top_k=arch.experts_active,
            tied_embeddings=arch.tied_embeddings,
            norm="layer" if arch.layer_norm_bias else "rms",
            qkv_bias=arch.qkv_bias or arch.linear_bias,
            linear_bias=arch.linear_bias,
        )

    @classmethod
    def from_config(
        cls, cfg: Mapping[str, Any], where: str = "LLM config", sequence_length: int | None = None
    ) -> TransformerSpec:
        """The spec of a HuggingFace config.json (or the short keys); ``ProfileError`` names a missing or
        bad key."""

        def get(keys: tuple[str, ...], default: Any = None, required: bool = True) -> Any:
            for k in keys:
                if k in cfg and cfg[k] is not None:
                    v = cfg[k]
                    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                        raise ProfileError(f"{where}: {k!r} must be a positive integer, got {v!r:.40}")
                    return v
            if required and default is None:
                raise ProfileError(
                    f"{where}: missing key {keys[0]!r} (or {' / '.join(repr(k) for k in keys[1:])})"
                )
            return default

        layers = get(("num_hidden_layers", "n_layer", "num_layers", "layers"))
        hidden = get(("hidden_size", "n_embd", "d_model", "hidden"))
        heads = get(("num_attention_heads", "n_head", "num_heads", "heads"))
        kv_heads = get(("num_key_value_heads", "num_kv_heads", "kv_heads"), default=heads)
        ffn = get(("intermediate_size", "n_inner", "ffn_hidden_size", "ffn"), default=4 * hidden)
        vocab = get(("vocab_size", "vocab"))
        seq = sequence_length or get(
            ("sequence_length", "seq_length", "max_sequence_length", "max_position_embeddings", "n_positions")
        )
        experts = get(("num_local_experts", "num_experts", "n_routed_experts", "experts"), default=1)
        top_k = get(("num_experts_per_tok", "moe_top_k", "top_k"), default=1)
        head_size = get(("head_dim",), default=0, required=False)
        if not head_size and hidden % heads:
            raise ProfileError(
                f"{where}: hidden size {hidden} is not a multiple of the {heads} attention heads"
            )
        if heads % kv_heads:
            raise ProfileError(
                f"{where}: {heads} attention heads are not a multiple of the {kv_heads} KV heads"
            )
        if top_k > experts:
            raise ProfileError(f"{where}: {top_k} experts per token but only {experts} experts")
        mtype = str(cfg.get("model_type", "")).lower()
        act = str(cfg.get("hidden_act", cfg.get("activation_function", ""))).lower()
        if "gated_mlp" in cfg:
            gated = bool(cfg["gated_mlp"])
        else:
            gated = act in ("silu", "swiglu", "swish") or mtype in (
                "llama",
                "mistral",
                "mixtral",
                "qwen2",
                "qwen2_moe",
                "gemma",
            )
        learned_pos = mtype in ("gpt2", "bert", "roberta", "opt") or "n_positions" in cfg
        layer_norm = (
            mtype in ("gpt2", "gpt_neox", "bert", "roberta", "opt", "mpt", "phi")
            or "layer_norm_epsilon" in cfg
        )
        bias = mtype in ("gpt2", "gpt_neox", "bert", "roberta", "opt", "phi") or bool(cfg.get("bias", False))
        return cls(
            layers=layers,
            hidden=hidden,
            heads=heads,
            kv_heads=kv_heads,
            ffn=ffn,
            vocab=vocab,
            sequence_length=seq,
            gated_mlp=gated,
            experts=experts,
            top_k=top_k if experts > 1 else 1,
            tied_embeddings=bool(cfg.get("tie_word_embeddings", mtype in ("gpt2", "bert", "mpt"))),
            norm="layer" if layer_norm else "rms",
            qkv_bias=bias or bool(cfg.get("attention_bias", False)) or mtype == "qwen2",
            linear_bias=bias,
            rotary=not learned_pos,
            causal=mtype not in ("bert", "roberta"),
            positions=(get(("n_positions", "max_position_embeddings"), default=seq) if learned_pos else 0),
            head_size=head_size,
        )


def load_config(path: str | Path) -> dict[str, Any]:
    """A config.json as a dict; ``ProfileError`` names an unreadable file."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"--llm {p}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ProfileError(f"--llm {p}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(doc, dict):
        raise ProfileError(f"--llm {p}: the config must be a JSON object")
    return doc


def _layer(net: Net, x: T, sp: TransformerSpec, pre_norm: bool = True, cross: int = 0) -> T:
    """One transformer layer (``cross``: the encoder length a decoder layer also attends to)."""
    b, s, h = x.shape
    kv = sp.kv_heads * sp.head_dim
    qw = sp.heads * sp.head_dim  # = h unless the config sets head_dim
    bias = sp.linear_bias

    def attn(x: T, kv_len: int, name: str, rope: bool) -> T:
        with net.scope(name):
            q = net.linear(x, qw, bias=sp.qkv_bias, name="q_proj")
            k = net.linear(x, kv, bias=sp.qkv_bias, name="k_proj")
            net.linear(x, kv, bias=sp.qkv_bias, name="v_proj")
            if rope:
                net.pointwise([q], "rotary_embedding", "rotary_q", flops_per_element=3.0)
                net.pointwise([k], "rotary_embedding", "rotary_k", flops_per_element=3.0)
            a = net.attention(T((b, s, qw)), kv_len, sp.heads, sp.kv_heads, sp.head_dim)
            return net.linear(a, h, bias=bias, name="o_proj")

    def mlp(x: T) -> T:
        with net.scope("mlp"):
            if sp.experts > 1:
                net.linear(x, sp.experts, bias=False, name="router")
                net.reduce(T((b * s, sp.experts)), (b * s, sp.top_k), "_softmax", "router_softmax_topk")
                return net.experts(x, sp.ffn, sp.experts, sp.top_k, sp.gated_mlp)
            if sp.gated_mlp:
                g = net.act(net.linear(x, sp.ffn, bias=bias, name="gate_proj"), "silu")
                u = net.linear(x, sp.ffn, bias=bias, name="up_proj")
                y = net.pointwise([g, u], "mul", "gate_mul")
            else:
                y = net.act(net.linear(x, sp.ffn, bias=bias, name="up_proj"), "gelu")
            return net.linear(y, h, bias=bias, name="down_proj")

    def norm(x: T, name: str) -> T:
        return net.norm(x, sp.norm, name)

    blocks: list[tuple[str, Any]] = [("self_attn", lambda y: attn(y, s, "self_attn", sp.rotary))]
    if cross:
        blocks.append(("cross_attn", lambda y: attn(y, cross, "cross_attn", False)))
    blocks.append(("mlp", mlp))
    for i, (name, fn) in enumerate(blocks):
        ln = f"norm{i + 1}"
        if pre_norm:
            x = net.add(x, fn(norm(x, ln)), f"{name}_residual")
        else:
            x = norm(net.add(x, net.dropout(fn(x)), f"{name}_residual"), ln)
    return x


def transformer_profile(
    sp: TransformerSpec,
    batch_size: int,
    name: str,
    source: Source,
    optimizer: str = "adamw",
) -> OperatorProfile:
    """One training step of a decoder LLM or an encoder (BERT-style, post-norm) at ``batch_size``
    sequences of ``sp.sequence_length`` tokens."""
    net = Net(name, batch_size, optimizer)
    s = sp.sequence_length
    tokens = (batch_size, s)
    x = net.embedding(tokens, sp.vocab, sp.hidden)
    encoder = not sp.causal
    if sp.positions:
        pos = net.embedding((1, s), sp.positions, sp.hidden, "embed_positions")
        x = net.add(x, pos, "add_positions")
    if encoder:
        x = net.dropout(net.norm(x, sp.norm, "embed_norm"))
    with net.repeat(sp.layers):
        x = _layer(net, x, sp, pre_norm=not encoder)
    if sp.head == "qa" or encoder:
        net.cross_entropy(net.linear(x, 2, name="qa_outputs"))
    else:
        x = net.norm(x, sp.norm, "norm")
        net.cross_entropy(net.linear(x, sp.vocab, bias=False, name="lm_head", tied=sp.tied_embeddings))
    return net.finish(source, Sample(sequence_length=s))


def seq2seq_profile(
    sp: TransformerSpec, src_len: int, tgt_len: int, batch_size: int, name: str, optimizer: str = "adamw"
) -> OperatorProfile:
    """The encoder-decoder Transformer (Vaswani et al. 2017): post-norm layers, shared source/target
    embedding tied with the output projection; a sample is a sentence pair."""
    net = Net(name, batch_size, optimizer)
    with net.scope("encoder"):
        x = net.embedding((batch_size, src_len), sp.vocab, sp.hidden, "embed")
        with net.repeat(sp.layers):
            x = _layer(net, x, sp, pre_norm=False)
    with net.scope("decoder"):
        y = net.embedding((batch_size, tgt_len), sp.vocab, sp.hidden, "embed", tied=True)
        with net.repeat(sp.layers):
            y = _layer(net, y, sp, pre_norm=False, cross=src_len)
        net.cross_entropy(net.linear(y, sp.vocab, bias=False, name="output_projection", tied=True))
    return net.finish(Source.ZOO, Sample(sequence_length=src_len + tgt_len))
