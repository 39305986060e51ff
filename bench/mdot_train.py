"""Train and evaluate the MDOT-style model on prepared arrays (run by ``bench/mdot_compare.py``).

Needs PyTorch and numpy only (no perfmodel import): ``bench/mdot_compare.py`` runs it with
``$PERFSCHED_TORCH_PYTHON`` (default ``/usr/bin/python3``, Debian's CPU PyTorch) on one thread. Reads the
arrays (``ARRAYS.npz``: tokens per profile, row and placement features, log step time) and the folds
(``FOLDS.npz``: per fold the training and test rows and a group id per training row for the inner hold-out),
writes the test predictions (log seconds per step) to ``OUT.npz`` and the choices per fold to ``OUT.json``.

Per fold: the inner hold-out is about 20% of the training rows, whole groups at a time (seeded). One
model with both readouts (``sum``, ``pool``: a shared encoder, the two losses added) trains on the other
training rows for ``--steps`` steps (mean |log error| of step time, AdamW, one-cycle learning rate) and is
scored on the hold-out every ``--steps / 6`` steps; the (readout, checkpoint) with the lowest mean
relative error of throughput there predicts the test rows (early stopping: the hold-out rows inform the
choice, not the weights). Operators whose type no training row has map to one "unseen" embedding;
numeric features are standardised with the training rows' statistics; both readouts start at the
datasheet roofline times the training rows' median ratio to it.

    /usr/bin/python3 bench/mdot_train.py ARRAYS.npz FOLDS.npz OUT.npz [--steps 300] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

D_MODEL = 24
HEADS = 4
LAYERS = 2
FF = 48
OP_DIM, CLASS_DIM, PHASE_DIM = 8, 4, 4
FREQS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)  # sinusoid frequencies (x pi) of the graph position
KEYS_PER_PROFILE, PROFILES_PER_STEP, ROWS_PER_STEP = 3, 4, 32
LR, WEIGHT_DECAY = 1e-2, 1e-4
CHECKPOINTS = 6
READOUTS = ("sum", "pool")


class Arrays:
    """The prepared arrays as tensors; one tensor of token features per profile."""

    def __init__(self, path: Path) -> None:
        a = np.load(path)
        self.offsets = a["offsets"]
        self.n_ops = int(a["n_ops"])
        self.tok_op = torch.as_tensor(a["tok_op"] + 1)  # 0 = an operator type no training row has
        self.tok_cls = torch.as_tensor(a["tok_cls"])
        self.tok_phase = torch.as_tensor(a["tok_phase"])
        self.tok_x = torch.as_tensor(a["tok_x"], dtype=torch.float32)
        self.cols = [str(c) for c in a["token_columns"]]
        self.row_cols = [str(c) for c in a["row_columns"]]
        self.batch_scaled = torch.as_tensor(a["batch_scaled"])
        self.prof = a["prof"]
        self.row_x = torch.as_tensor(a["row_x"], dtype=torch.float32)
        self.place_x = torch.as_tensor(a["place_x"], dtype=torch.float32)
        self.log_t = torch.as_tensor(a["log_t"], dtype=torch.float32)
        self.n_prof = len(self.offsets) - 1
        # Rows that differ only in their placement share the sequence's encoding: one compute key each.
        both = np.concatenate([a["prof"][:, None].astype(np.float64), a["row_x"]], axis=1)
        _, first, self.key = np.unique(both, axis=0, return_index=True, return_inverse=True)
        self.key = self.key.reshape(-1)
        self.key_row = first  # a representative row of each key
        # Token features of every key, built once: per profile, one ``Batch`` over its keys.
        key_prof = self.prof[first]
        self.key_local = np.zeros(len(first), dtype=np.int64)
        self.batches: dict[int, Batch] = {}
        for p in range(self.n_prof):
            ks = np.flatnonzero(key_prof == p)
            self.key_local[ks] = np.arange(len(ks))
            if len(ks):
                self.batches[p] = Batch(self, p, torch.as_tensor(first[ks]))

    def tokens(self, p: int) -> slice:
        return slice(int(self.offsets[p]), int(self.offsets[p + 1]))


def position_code(x: torch.Tensor) -> torch.Tensor:
    """Sinusoids of a position in [0, 1]: (..., 2 x len(FREQS))."""
    f = torch.as_tensor(FREQS) * math.pi
    ang = x.unsqueeze(-1) * f
    return torch.cat([torch.sin(ang), torch.cos(ang)], dim=-1)


class Batch:
    """Token features of some rows of one profile, before standardisation."""

    def __init__(self, a: Arrays, p: int, rows: torch.Tensor) -> None:
        sl = a.tokens(p)
        x = a.tok_x[sl].unsqueeze(0).repeat(len(rows), 1, 1)  # (B, L, C)
        rx = a.row_x[rows]
        c = {name: i for i, name in enumerate(a.cols)}
        r = {name: i for i, name in enumerate(a.row_cols)}
        shift = rx[:, r["log_micro_ratio"]].view(-1, 1) * x[:, :, c["scales_with_batch"]]
        for j in a.batch_scaled.tolist():
            x[:, :, j] = x[:, :, j] + shift
        gemm_m = torch.where(x[:, :, c["batch_in_k"]] > 0, x[:, :, c["log_k"]], x[:, :, c["log_m"]])
        gemm_m = gemm_m + shift * (x[:, :, c["log_m"]] > 0).float()
        is_mm, is_opt = x[:, :, c["is_matmul"]], x[:, :, c["is_optimizer"]]
        peak = is_mm * rx[:, r["log_peak_matmul"]].view(-1, 1) + (1 - is_mm) * rx[:, r["log_peak_fp32"]].view(
            -1, 1
        )
        width = (1 - is_opt) * rx[:, r["log_width"]].view(-1, 1)
        t_c = x[:, :, c["log_flops"]] - peak
        t_m = x[:, :, c["log_bytes"]] + width - rx[:, r["log_bw"]].view(-1, 1)
        self.roof = torch.maximum(t_c, t_m)  # log seconds of one instance at the datasheet roofline
        self.log_count = x[:, :, c["log_count"]]
        pos = torch.cat([position_code(x[:, :, c["depth"]]), position_code(x[:, :, c["index"]])], dim=-1)
        broadcast = rx.unsqueeze(1).expand(-1, x.shape[1], -1)
        self.num = torch.cat(
            [
                x,
                gemm_m.unsqueeze(-1),
                t_c.unsqueeze(-1),
                t_m.unsqueeze(-1),
                self.roof.unsqueeze(-1),
                broadcast,
            ],
            dim=-1,
        )
        self.pos = pos
        self.op, self.cls, self.phase = a.tok_op[sl], a.tok_cls[sl], a.tok_phase[sl]

    def take(self, idx: torch.Tensor) -> Batch:
        """The same profile's tokens for the keys at ``idx`` (positions within this batch)."""
        out = Batch.__new__(Batch)
        out.num, out.pos, out.roof, out.log_count = (
            self.num[idx],
            self.pos[idx],
            self.roof[idx],
            self.log_count[idx],
        )
        out.op, out.cls, out.phase = self.op, self.cls, self.phase
        return out


class MDOT(nn.Module):
    """Multi-dimensional operator encoding + graph position encoding + a small Transformer encoder."""

    def __init__(self, n_ops: int, n_num: int, n_place: int) -> None:
        super().__init__()
        self.op = nn.Embedding(n_ops + 1, OP_DIM)
        self.cls = nn.Embedding(16, CLASS_DIM)
        self.phase = nn.Embedding(4, PHASE_DIM)
        self.inp = nn.Linear(n_num + 4 * len(FREQS) + OP_DIM + CLASS_DIM + PHASE_DIM, D_MODEL)
        layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, LAYERS)
        self.token_head = nn.Linear(D_MODEL, 1)
        self.head = nn.Sequential(nn.Linear(D_MODEL + n_place, FF), nn.GELU(), nn.Linear(FF, 3))
        for lin in (self.token_head, self.head[-1]):
            nn.init.zeros_(lin.weight)  # start at the datasheet roofline
            nn.init.zeros_(lin.bias)

    def encode(
        self, b: Batch, num: torch.Tensor, seen_ops: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per key: (pooled encoding, log compute seconds of the ``sum`` readout, log roofline step)."""
        op = torch.where(seen_ops[b.op], b.op, torch.zeros_like(b.op))
        kinds = torch.cat([self.op(op), self.cls(b.cls), self.phase(b.phase)], dim=-1)
        h = torch.cat([num, b.pos, kinds.unsqueeze(0).expand(num.shape[0], -1, -1)], dim=-1)
        h = self.encoder(self.inp(h))
        per_op = b.roof + self.token_head(h).squeeze(-1)
        return (
            h.mean(dim=1),
            torch.logsumexp(b.log_count + per_op, dim=1),
            torch.logsumexp(b.log_count + b.roof, dim=1),
        )

    def forward(
        self,
        enc: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        place: torch.Tensor,
        place_raw: torch.Tensor,
        log_accum: torch.Tensor,
    ) -> torch.Tensor:
        """Log seconds per step of rows whose keys' encodings are ``enc`` (already expanded to rows), by
        the ``sum`` and the ``pool`` readout: (rows, 2)."""
        pooled, summed, roof = enc
        g = self.head(torch.cat([pooled, place], dim=-1))
        compute = torch.stack([summed, roof + g[:, 0]], dim=1) + log_accum.unsqueeze(1)
        multi = (place_raw[:, 0] > 0).float().unsqueeze(1)
        comm = (place_raw[:, 1] + g[:, 1 + 0]).unsqueeze(1)  # log ring all-reduce s + a learned log factor
        comm = torch.cat([comm, (place_raw[:, 1] + g[:, 2]).unsqueeze(1)], dim=1)
        out: torch.Tensor = multi * torch.logaddexp(compute, comm) + (1 - multi) * compute
        return out


class Scaler:
    """Mean and standard deviation of the numeric token and placement features over training rows."""

    def __init__(self, a: Arrays, rows: np.ndarray) -> None:
        nums = []
        for p in np.unique(a.prof[rows]):
            keys = np.unique(a.key[rows[a.prof[rows] == p]])
            num = a.batches[int(p)].num[torch.as_tensor(a.key_local[keys])]
            nums.append(num.reshape(-1, num.shape[-1]))
        allnum = torch.cat(nums)
        self.mu, self.sd = allnum.mean(0), allnum.std(0).clamp_min(1e-3)
        pl = a.place_x[torch.as_tensor(rows)]
        self.pmu, self.psd = pl.mean(0), pl.std(0).clamp_min(1e-3)


def num_columns(a: Arrays) -> int:
    """The width of ``Batch.num``: token columns, GEMM m at the batch, three roofline terms, row columns."""
    return len(a.cols) + 4 + len(a.row_cols)


def _predict(model: MDOT, a: Arrays, rows: np.ndarray, sc: Scaler, seen_ops: torch.Tensor) -> np.ndarray:
    out = np.zeros((len(rows), len(READOUTS)))
    model.eval()
    with torch.no_grad():
        for p in np.unique(a.prof[rows]):
            where = np.flatnonzero(a.prof[rows] == p)
            for s in range(0, len(where), 256):
                w = where[s : s + 256]
                out[w] = _forward(model, a, int(p), rows[w], sc, seen_ops).numpy()
    model.train()
    return out


def _forward(
    model: MDOT, a: Arrays, p: int, rows: np.ndarray, sc: Scaler, seen_ops: torch.Tensor
) -> torch.Tensor:
    """Log seconds per step of ``rows`` (all of profile ``p``): the sequence encoded once per compute key."""
    keys, inverse = np.unique(a.key[rows], return_inverse=True)
    b = a.batches[p].take(torch.as_tensor(a.key_local[keys]))
    num = (b.num - sc.mu) / sc.sd
    inv = torch.as_tensor(inverse.reshape(-1))
    pooled, summed, roof = model.encode(b, num, seen_ops)
    enc = (pooled[inv], summed[inv], roof[inv])
    place_raw = a.place_x[torch.as_tensor(rows)]
    place = (place_raw - sc.pmu) / sc.psd
    # placement columns: 0 log_gpus, 6 log_ring, 8 log_accum (bench/mdot_compare.PLACEMENT_COLUMNS)
    raw = torch.stack([place_raw[:, 0], place_raw[:, 6]], dim=1)
    return model(enc, place, raw, place_raw[:, 8])


def _rel_err(pred_log_t: np.ndarray, log_t: np.ndarray) -> float:
    """Mean relative error of throughput, |predicted / measured - 1| (as ``bench.perfmodel_accuracy``)."""
    return float(np.mean(np.abs(np.exp(log_t - pred_log_t) - 1.0)))


def train(
    a: Arrays, rows: np.ndarray, val: np.ndarray, steps: int, seed: int
) -> tuple[MDOT, Scaler, torch.Tensor, str, int, float]:
    """Fit both readouts on ``rows``; keep the (readout, checkpoint) with the lowest error on ``val``:
    (model at that checkpoint, scaler, seen operator types, readout, steps, validation error)."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    seen = np.zeros(a.n_ops + 1, dtype=bool)
    for p in np.unique(a.prof[rows]):
        seen[a.tok_op[a.tokens(int(p))].numpy()] = True
    seen[0] = True
    seen_ops = torch.as_tensor(seen)
    sc = Scaler(a, rows)
    model = MDOT(a.n_ops, num_columns(a), a.place_x.shape[1])
    # Start both readouts at the datasheet roofline times the training rows' median ratio to it.
    with torch.no_grad():
        offset = float(np.median(a.log_t[rows].numpy() - _predict(model, a, rows, sc, seen_ops)[:, 0]))
        model.token_head.bias.fill_(offset)
        model.head[-1].bias[0] = offset
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=LR, total_steps=steps, pct_start=0.1)
    profs, counts = np.unique(a.prof[rows], return_counts=True)
    weight = np.sqrt(counts) / np.sqrt(counts).sum()
    by_prof = {int(p): rows[a.prof[rows] == p] for p in profs}
    every = max(1, steps // CHECKPOINTS)
    best: tuple[float, str, int, dict[str, torch.Tensor]] | None = None
    for step in range(1, steps + 1):
        chosen = rng.choice(profs, size=min(PROFILES_PER_STEP, len(profs)), replace=False, p=weight)
        loss = torch.zeros(())
        for p in chosen:
            rs = by_prof[int(p)]
            keys = np.unique(a.key[rs])
            keys = rng.choice(keys, size=min(KEYS_PER_PROFILE, len(keys)), replace=False)
            pick = rs[np.isin(a.key[rs], keys)]
            if len(pick) > ROWS_PER_STEP:
                pick = rng.choice(pick, size=ROWS_PER_STEP, replace=False)
            pred = _forward(model, a, int(p), pick, sc, seen_ops)
            loss = loss + (pred - a.log_t[torch.as_tensor(pick)].unsqueeze(1)).abs().mean()
        opt.zero_grad()
        (loss / len(chosen)).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % every == 0 or step == steps:
            pv = _predict(model, a, val, sc, seen_ops)
            for j, readout in enumerate(READOUTS):
                err = _rel_err(pv[:, j], a.log_t[val].numpy())
                if best is None or err < best[0]:
                    state = {k: v.clone() for k, v in model.state_dict().items()}
                    best = (err, readout, step, state)
    assert best is not None
    err, readout, at, state = best
    model.load_state_dict(state)
    return model, sc, seen_ops, readout, at, err


def inner_split(groups: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(inner-train, validation) positions: whole groups, about 20% of the rows, seeded."""
    rng = np.random.default_rng(seed)
    uniq = rng.permutation(np.unique(groups))
    val_groups: list[int] = []
    held = 0
    for g in uniq[:-1]:
        if held >= 0.2 * len(groups):
            break
        val_groups.append(int(g))
        held += int((groups == g).sum())
    is_val = np.isin(groups, val_groups)
    return np.flatnonzero(~is_val), np.flatnonzero(is_val)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("arrays", type=Path)
    ap.add_argument("folds", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    a = Arrays(args.arrays)
    f = np.load(args.folds)
    names = [str(n) for n in f["names"]]
    preds: dict[str, np.ndarray] = {}
    chosen: list[str] = []
    for k, name in enumerate(names):
        t0 = time.time()
        train_rows, test_rows, groups = f[f"train_{k}"], f[f"test_{k}"], f[f"group_{k}"]
        inner, val = inner_split(groups, args.seed + k)
        model, sc, seen_ops, readout, steps, err = train(
            a, train_rows[inner], train_rows[val], args.steps, args.seed + k
        )
        preds[f"pred_{k}"] = _predict(model, a, test_rows, sc, seen_ops)[:, READOUTS.index(readout)]
        chosen.append(f"{readout}/{steps}")
        test_err = _rel_err(preds[f"pred_{k}"], a.log_t[test_rows].numpy())
        print(
            f"  mdot {name}: {readout} readout, {steps} steps (inner hold-out {100 * err:.1f}%); "
            f"test {100 * test_err:.1f}% ({time.time() - t0:.0f} s)",
            flush=True,
        )
    np.savez(args.out, **preds)
    args.out.with_suffix(".json").write_text(json.dumps({"chosen": chosen}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
