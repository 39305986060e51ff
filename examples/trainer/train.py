"""perfsched example trainer: a small real model trained with PyTorch DDP, on perfsched's worker contract.

Runs under ``torchrun`` or as one process per pod with the ``WORLD_SIZE``/``RANK``/``MASTER_ADDR``/
``MASTER_PORT`` the perfsched operator sets; ``gloo`` on CPU, ``nccl`` on GPU. It trains a ResNet
(CIFAR-style ResNet-18, or a tiny one) or a small causal transformer on synthetic data that is a pure
function of ``(seed, step)``, so the samples of a step are the same whatever the world size:

- progress (iterations, or samples when ``PERFSCHED_WORK_UNIT=samples``) and throughput are reported
  with ``scheduler.worker.ProgressReporter`` inside a pod (``PERFSCHED_POD_NAME`` set), else logged;
- replica 0 saves a checkpoint every ``--checkpoint-every`` steps, at the end, and on SIGTERM (all
  replicas agree on the step to stop at, so the checkpoint is consistent), then exits 143;
- at start it resumes from the newest checkpoint in ``--checkpoint-dir`` (the operator's
  ``perfsched.dev/start-progress`` says which one it expects), with the same global batch split over the
  new world size, and logs ``resumed from step N``;
- bad input (missing or unwritable checkpoint directory, a world size that does not divide the global
  batch, a corrupt or foreign checkpoint, a start progress with no checkpoint behind it) ends with one
  line ``train.py: error: ...`` and exit code 2, never a silent restart from step 0.

Replica 0 also appends one JSON line per step to ``<checkpoint-dir>/metrics.jsonl``
(``step``, ``loss``, ``world_size``, ``samples_per_s``, ``run``, ``time``): the loss curve across restarts.

Laptop: ``python -m torch.distributed.run --nproc_per_node 2 examples/trainer/train.py --model
resnet-tiny --steps 200 --global-batch-size 32 --checkpoint-dir /tmp/ckpt``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import math
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
EXIT_TERMINATED = 128 + signal.SIGTERM
CHECKPOINT_RE = re.compile(r"^ckpt-(\d{9})\.pt$")
KEEP_CHECKPOINTS = 2
NOISE_STD = 3.0

log = logging.getLogger("train")


class BadInput(Exception):
    """Input the trainer refuses: reported as one line, exit code 2."""


class Terminated(Exception):
    """SIGTERM was handled: the checkpoint (if any) is saved; exit 143."""


# --- models ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    """A trainable model and the synthetic task it learns."""

    kind: str  # "resnet" | "transformer"
    widths: tuple[int, ...] = ()
    bottleneck: bool = False
    blocks: tuple[int, ...] = ()
    image: int = 32
    classes: int = 10
    layers: int = 2
    d_model: int = 64
    heads: int = 4
    seq: int = 32
    vocab: int = 64


MODELS: dict[str, ModelSpec] = {
    # CIFAR-style ResNet-18: 11.2 M parameters, 3x32x32 inputs, 10 classes
    "resnet18": ModelSpec("resnet", widths=(64, 128, 256, 512), blocks=(2, 2, 2, 2), image=32),
    # CIFAR-style ResNet-50 (bottleneck blocks, 23.5 M parameters)
    "resnet50": ModelSpec(
        "resnet", widths=(64, 128, 256, 512), blocks=(3, 4, 6, 3), image=32, bottleneck=True
    ),
    # the same network, narrow and shallow (about 0.1 M parameters): seconds per hundred steps on a CPU
    "resnet-tiny": ModelSpec("resnet", widths=(8, 16, 32, 64), blocks=(1, 1, 1, 1), image=16),
    # a GPT-style causal transformer: 4 layers, d=256, 128 tokens over a vocabulary of 256
    "transformer": ModelSpec("transformer", layers=4, d_model=256, heads=8, seq=128, vocab=256),
    "transformer-tiny": ModelSpec("transformer", layers=2, d_model=64, heads=4, seq=32, vocab=64),
}


def build_model(spec: ModelSpec) -> Any:
    import torch
    from torch import nn

    if spec.kind == "resnet":

        class Block(nn.Module):
            """A basic block (two 3x3 convolutions), or a bottleneck (1x1, 3x3, 1x1 at 4x width)."""

            def __init__(self, cin: int, width: int, stride: int) -> None:
                super().__init__()
                cout = width * 4 if spec.bottleneck else width
                if spec.bottleneck:
                    self.body = nn.Sequential(
                        nn.Conv2d(cin, width, 1, bias=False),
                        nn.BatchNorm2d(width),
                        nn.ReLU(),
                        nn.Conv2d(width, width, 3, stride, 1, bias=False),
                        nn.BatchNorm2d(width),
                        nn.ReLU(),
                        nn.Conv2d(width, cout, 1, bias=False),
                        nn.BatchNorm2d(cout),
                    )
                else:
                    self.body = nn.Sequential(
                        nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
                        nn.BatchNorm2d(cout),
                        nn.ReLU(),
                        nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
                        nn.BatchNorm2d(cout),
                    )
                self.cout = cout
                self.short = (
                    nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                    if stride != 1 or cin != cout
                    else nn.Identity()
                )

            def forward(self, x: Any) -> Any:
                return torch.relu(self.body(x) + self.short(x))

        layers: list[Any] = [
            nn.Conv2d(3, spec.widths[0], 3, 1, 1, bias=False),
            nn.BatchNorm2d(spec.widths[0]),
            nn.ReLU(),
        ]
        cin = spec.widths[0]
        for i, (width, n) in enumerate(zip(spec.widths, spec.blocks, strict=True)):
            for j in range(n):
                block = Block(cin, width, 2 if (i > 0 and j == 0) else 1)
                layers.append(block)
                cin = block.cout
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, spec.classes)]
        return nn.Sequential(*layers)

    class TinyGPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(spec.vocab, spec.d_model)
            self.pos = nn.Parameter(torch.zeros(1, spec.seq, spec.d_model))
            layer = nn.TransformerEncoderLayer(
                spec.d_model, spec.heads, 4 * spec.d_model, dropout=0.0, batch_first=True
            )
            self.body = nn.TransformerEncoder(layer, spec.layers)
            self.head = nn.Linear(spec.d_model, spec.vocab)
            mask = torch.triu(torch.full((spec.seq, spec.seq), float("-inf")), diagonal=1)
            self.register_buffer("mask", mask, persistent=False)

        def forward(self, x: Any) -> Any:
            h = self.tok(x) + self.pos[:, : x.shape[1]]
            return self.head(self.body(h, mask=self.mask[: x.shape[1], : x.shape[1]]))

    return TinyGPT()


class Task:
    """Synthetic data as a pure function of ``(seed, step)``: every world size sees the same samples.

    ResNet: each class has a fixed random prototype image; a sample is its class's prototype plus Gaussian
    noise of standard deviation ``NOISE_STD`` (hard enough that the loss falls over hundreds of steps).
    Transformer: arithmetic sequences ``(a + d*t) mod vocab``; predict the next token.
    """

    def __init__(self, spec: ModelSpec, seed: int) -> None:
        import torch

        self.spec, self.seed = spec, seed
        g = torch.Generator().manual_seed(seed)
        if spec.kind == "resnet":
            self.prototypes = torch.randn(spec.classes, 3, spec.image, spec.image, generator=g)

    def batch(self, step: int, global_batch: int, rank: int, world: int) -> tuple[Any, Any]:
        import torch

        g = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        per = global_batch // world
        lo, hi = rank * per, (rank + 1) * per
        s = self.spec
        if s.kind == "resnet":
            y = torch.randint(0, s.classes, (global_batch,), generator=g)
            noise = NOISE_STD * torch.randn(global_batch, 3, s.image, s.image, generator=g)
            x = self.prototypes[y] + noise
            return x[lo:hi], y[lo:hi]
        a = torch.randint(0, s.vocab, (global_batch, 1), generator=g)
        d = torch.randint(1, 8, (global_batch, 1), generator=g)
        t = torch.arange(s.seq + 1).unsqueeze(0)
        seqs = (a + d * t) % s.vocab
        return seqs[lo:hi, :-1], seqs[lo:hi, 1:]

    def loss(self, model: Any, x: Any, y: Any) -> Any:
        import torch.nn.functional as F

        out = model(x)
        if self.spec.kind == "resnet":
            return F.cross_entropy(out, y)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


# --- progress reporting ----------------------------------------------------------------------------------


class Reporter(Protocol):
    def start_progress(self) -> float: ...

    def report(self, progress: float, checkpoint: float | None = None, force: bool = False) -> bool: ...

    def checkpoint(self, progress: float) -> bool: ...

    def finish(self, total: float) -> bool: ...


class LogReporter:
    """Outside a pod: progress goes to the log (every ``interval_s``), start progress from the env."""

    def __init__(self, interval_s: float = 10.0) -> None:
        self.interval_s = interval_s
        self._last: tuple[float, float] | None = None

    def start_progress(self) -> float:
        return _env_float("PERFSCHED_START_PROGRESS", 0.0)

    def report(self, progress: float, checkpoint: float | None = None, force: bool = False) -> bool:
        now = time.monotonic()
        if not force and self._last is not None and now - self._last[0] < self.interval_s:
            return False
        rate = 0.0
        if self._last is not None and now > self._last[0]:
            rate = (progress - self._last[1]) / (now - self._last[0])
        ck = "" if checkpoint is None else f", checkpoint {checkpoint:g}"
        log.info("progress %g%s (%.3g units/s)", progress, ck, rate)
        self._last = (now, progress)
        return True

    def checkpoint(self, progress: float) -> bool:
        return self.report(progress, checkpoint=progress, force=True)

    def finish(self, total: float) -> bool:
        return self.report(total, checkpoint=total, force=True)


def make_reporter() -> Reporter:
    if not os.environ.get("PERFSCHED_POD_NAME"):
        return LogReporter()
    try:
        from scheduler.worker import ProgressReporter
    except ImportError as exc:
        raise BadInput(
            f"PERFSCHED_POD_NAME is set but scheduler.worker cannot be imported ({exc}): install perfsched "
            "in the image (or put the perfsched checkout on PYTHONPATH)"
        ) from None
    reporter: Reporter = ProgressReporter()
    return reporter


# --- checkpoints -----------------------------------------------------------------------------------------


def check_dir(path: Path) -> None:
    """The checkpoint directory must exist and be writable (it is a volume in a pod)."""
    if not path.is_dir():
        raise BadInput(f"--checkpoint-dir {path} does not exist or is not a directory (mount a volume there)")
    probe = path / f".write-test-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise BadInput(f"--checkpoint-dir {path} is not writable: {exc.strerror or exc}") from None


def checkpoints(path: Path) -> list[tuple[int, Path]]:
    """(step, file) of every checkpoint in ``path``, oldest first."""
    found = []
    for f in path.iterdir():
        m = CHECKPOINT_RE.match(f.name)
        if m:
            found.append((int(m.group(1)), f))
    return sorted(found)


def load_checkpoint(file: Path, step: int, model_name: str, global_batch: int) -> dict[str, Any]:
    import torch

    try:
        state = torch.load(file, map_location="cpu")
    except Exception as exc:  # torch raises many kinds for a damaged file
        raise BadInput(f"corrupt checkpoint {file}: {type(exc).__name__}: {exc}") from None
    if not isinstance(state, dict) or not {"step", "model", "state", "optimizer"} <= set(state):
        raise BadInput(f"corrupt checkpoint {file}: not a checkpoint written by this trainer")
    if state["step"] != step:
        raise BadInput(f"corrupt checkpoint {file}: holds step {state['step']}, its name says {step}")
    if state["model"] != model_name:
        raise BadInput(f"checkpoint {file} is of model {state['model']!r}, not --model {model_name!r}")
    if state.get("global_batch") != global_batch:
        raise BadInput(
            f"checkpoint {file} was trained with global batch {state.get('global_batch')}, "
            f"not --global-batch-size {global_batch} (keep the global batch across restarts)"
        )
    return state


def save_checkpoint(path: Path, state: dict[str, Any]) -> Path:
    """Write atomically (temporary file, fsync, rename), then keep only the newest few."""
    import torch

    final = path / f"ckpt-{state['step']:09d}.pt"
    tmp = path / f".{final.name}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    for _, old in checkpoints(path)[:-KEEP_CHECKPOINTS]:
        old.unlink(missing_ok=True)
    return final


# --- the run ---------------------------------------------------------------------------------------------


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise BadInput(f"{name}={raw!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise BadInput(f"{name}={raw!r} must be a number >= 0")
    return value


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise BadInput(f"{name}={raw!r} is not an integer") from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="train.py", description="perfsched example trainer (PyTorch DDP on synthetic data)"
    )
    p.add_argument("--model", default="resnet-tiny", choices=sorted(MODELS))
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="optimizer steps in all [default: the TrainingJob's work, from PERFSCHED_TOTAL_WORK]",
    )
    p.add_argument("--global-batch-size", type=int, default=32, help="samples per step, all replicas")
    p.add_argument("--checkpoint-dir", type=Path, required=True, help="an existing, writable directory")
    p.add_argument("--checkpoint-every", type=int, default=100, help="steps between checkpoints (0: never)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10, help="steps between log lines")
    p.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto")
    p.add_argument("--dist-timeout", type=float, default=300.0, help="seconds a collective may wait")
    return p.parse_args(argv)


@dataclass
class Plan:
    """What this process runs, from flags and environment (validated before any collective)."""

    model: str
    total_steps: int
    global_batch: int
    per_replica: int
    world: int
    rank: int
    local_rank: int
    unit_per_step: int  # work units per step: 1 (iterations) or the global batch (samples)


def make_plan(args: argparse.Namespace) -> Plan:
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    if world < 1 or not 0 <= rank < world:
        raise BadInput(f"RANK={rank} WORLD_SIZE={world}: need 0 <= RANK < WORLD_SIZE")
    if args.global_batch_size < 1:
        raise BadInput(f"--global-batch-size must be >= 1, got {args.global_batch_size}")
    if args.global_batch_size % world:
        raise BadInput(
            f"world size {world} does not divide --global-batch-size {args.global_batch_size} "
            "(the global batch is kept across resizes; pick replica counts that divide it)"
        )
    if args.checkpoint_every < 0:
        raise BadInput(f"--checkpoint-every must be >= 0, got {args.checkpoint_every}")
    unit = os.environ.get("PERFSCHED_WORK_UNIT", "iterations") or "iterations"
    if unit not in ("iterations", "samples"):
        raise BadInput(f"PERFSCHED_WORK_UNIT={unit!r}: expected iterations or samples")
    per_step = args.global_batch_size if unit == "samples" else 1
    steps = args.steps
    if steps is None:
        total = _env_float("PERFSCHED_TOTAL_WORK", 0.0)
        if total <= 0:
            raise BadInput("--steps is missing and PERFSCHED_TOTAL_WORK is not set")
        steps = math.ceil(total / per_step)
    if steps < 1:
        raise BadInput(f"--steps must be >= 1, got {steps}")
    check_dir(args.checkpoint_dir)
    return Plan(
        model=args.model,
        total_steps=steps,
        global_batch=args.global_batch_size,
        per_replica=args.global_batch_size // world,
        world=world,
        rank=rank,
        local_rank=_env_int("LOCAL_RANK", 0),
        unit_per_step=per_step,
    )


def pick_checkpoint(
    ckpt_dir: Path, start_step: int, model_name: str, global_batch: int
) -> tuple[int, dict[str, Any] | None]:
    """The step to resume from and its checkpoint state (0, None: a fresh start)."""
    found = checkpoints(ckpt_dir)
    if not found:
        if start_step > 0:
            raise BadInput(
                f"start progress is step {start_step} but {ckpt_dir} holds no checkpoint "
                "(wrong volume? refusing to restart from step 0)"
            )
        return 0, None
    step, file = found[-1]
    state = load_checkpoint(file, step, model_name, global_batch)
    if step < start_step:
        log.warning(
            "the newest checkpoint (step %d) is older than the start progress (step %d): "
            "steps %d..%d are trained again",
            step, start_step, step + 1, start_step,
        )  # fmt: skip
    return step, state


class StopFlag:
    """Set by SIGTERM; checked (and agreed on by all replicas) once per step."""

    def __init__(self) -> None:
        self.set = False
        self.ignored = signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        if self.ignored:
            # a parent that ignores SIGTERM (nohup-style) keeps it ignored, as Unix programs do
            log.warning("SIGTERM is ignored by this process's parent: no checkpoint on termination")
        else:
            signal.signal(signal.SIGTERM, self._on_term)

    def _on_term(self, signum: int, frame: object) -> None:
        self.set = True


def run(args: argparse.Namespace, clock: Callable[[], float] = time.monotonic) -> int:
    plan = make_plan(args)
    stop = StopFlag()
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available() and args.backend != "gloo"
    backend = args.backend if args.backend != "auto" else ("nccl" if cuda else "gloo")
    device = torch.device(f"cuda:{plan.local_rank}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    reporter = make_reporter() if plan.rank == 0 else None
    start_progress = (
        reporter.start_progress() if reporter is not None else _env_float("PERFSCHED_START_PROGRESS", 0.0)
    )
    start_step = int(start_progress // plan.unit_per_step)
    step, state = pick_checkpoint(args.checkpoint_dir, start_step, plan.model, plan.global_batch)

    distributed = plan.world > 1
    if distributed:
        dist.init_process_group(
            backend, timeout=datetime.timedelta(seconds=args.dist_timeout), init_method="env://"
        )
    torch.manual_seed(args.seed)
    spec = MODELS[plan.model]
    model = build_model(spec).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    if state is not None:
        model.load_state_dict(state["state"])
        opt.load_state_dict(state["optimizer"])
        log.info(
            "resumed from step %d (checkpoint written at world size %d, now %d; %d samples per replica)",
            step, state.get("world_size", 0), plan.world, plan.per_replica,
        )  # fmt: skip
    else:
        log.info("starting at step 0 (world size %d, %d samples per replica)", plan.world, plan.per_replica)
    net = torch.nn.parallel.DistributedDataParallel(model) if distributed else model
    task = Task(spec, args.seed)
    metrics = args.checkpoint_dir / "metrics.jsonl" if plan.rank == 0 else None
    run_id = os.environ.get("PERFSCHED_GENERATION") or f"pid{os.getpid()}"
    last_ckpt = step

    def save(at: int) -> None:
        nonlocal last_ckpt
        if plan.rank != 0 or at == last_ckpt:
            return
        t0 = clock()
        body = {
            "step": at,
            "model": plan.model,
            "global_batch": plan.global_batch,
            "world_size": plan.world,
            "state": model.state_dict(),
            "optimizer": opt.state_dict(),
        }
        path = save_checkpoint(args.checkpoint_dir, body)
        last_ckpt = at
        assert reporter is not None
        reporter.checkpoint(at * plan.unit_per_step)
        log.info("checkpoint %s saved in %.2f s", path.name, clock() - t0)

    t_log, s_log = clock(), step
    try:
        while step < plan.total_steps:
            x, y = task.batch(step, plan.global_batch, plan.rank, plan.world)
            loss = task.loss(net, x.to(device), y.to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            # one small collective per step: the mean loss and whether any replica got SIGTERM
            agreed = torch.tensor([loss.item(), 1.0 if stop.set else 0.0], device=device)
            if distributed:
                dist.all_reduce(agreed)
            mean_loss = agreed[0].item() / plan.world
            if reporter is not None:
                reporter.report(step * plan.unit_per_step, checkpoint=last_ckpt * plan.unit_per_step)
            now = clock()
            if metrics is not None:
                rate = (step - s_log) * plan.global_batch / max(now - t_log, 1e-9)
                with open(metrics, "a") as f:
                    f.write(
                        json.dumps(
                            {
                                "step": step,
                                "loss": round(mean_loss, 6),
                                "world_size": plan.world,
                                "samples_per_s": round(rate, 3),
                                "run": run_id,
                                "time": round(time.time(), 3),
                            }
                        )
                        + "\n"
                    )
            if plan.rank == 0 and (step % args.log_every == 0 or step == plan.total_steps):
                rate = (step - s_log) * plan.global_batch / max(now - t_log, 1e-9)
                log.info(
                    "step %d/%d loss %.4f %.1f samples/s (world size %d)",
                    step, plan.total_steps, mean_loss, rate, plan.world,
                )  # fmt: skip
                t_log, s_log = now, step
            if agreed[1].item() > 0:
                save(step)
                raise Terminated(step)
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                save(step)
    except Terminated:
        log.info("SIGTERM: every replica stopped at step %d, replica 0 saved it; exiting", step)
        if distributed:
            dist.destroy_process_group()
        return EXIT_TERMINATED
    except RuntimeError:
        if not stop.set:
            raise
        # a peer left first (it was terminated too): this replica's weights are those of `step`
        save(step)
        log.info("SIGTERM while a peer left: stopped at step %d; exiting", step)
        return EXIT_TERMINATED
    save(step)
    if reporter is not None:
        reporter.finish(plan.total_steps * plan.unit_per_step)
    log.info("done: %d steps", plan.total_steps)
    if distributed:
        dist.destroy_process_group()
    return 0


def main(argv: list[str] | None = None) -> int:
    rank = os.environ.get("RANK", "0")
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s rank {rank} %(levelname)s: %(message)s",
        stream=sys.stdout,
    )
    args = parse_args(argv)
    try:
        return run(args)
    except BadInput as exc:
        print(f"train.py: error: {exc}", file=sys.stderr, flush=True)  # noqa: T201 (the one line)
        return EXIT_BAD_INPUT
    except RuntimeError as exc:
        print(f"train.py: failed: {exc}", file=sys.stderr, flush=True)  # noqa: T201
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
