"""Benchmark: a new operator's first round with the learning state restored against replaying every
finished TrainingJob, and the stored state's size at the learning oracle's bounds.

A fake API server (``scheduler.k8s.fakeapi.FakeKubeApi``) holds ``--jobs`` Succeeded TrainingJobs (each
with its measured throughput, 0.6-1.5x the cold prediction, and its gang's placement), spread over 16
zoo models x 2 precisions x 4 GPU types (128 model levels: at 4,096 jobs the shared levels hold exactly
their bound, 32 ended jobs per model and type, 4,096 in all) at 32 distinct batch x GPU-count
configurations each (4,096 held-out answers). Measured, in one process, on the plain-Python core:

1. a new operator process with no stored state: its first round replays every job (``_replay``);
2. the state that process would store (``scheduler.operator.learning_state.encode``): its encode time
   and compressed size (a ConfigMap holds at most 1 MiB);
3. a new operator process that restores that state: its first round (read, decode, restore, no
   replay), and whether it then answers bit for bit as the first one (every model level, 4 GPUs);
4. the state's size once ``--live`` running jobs (one report each, each with a random uid as the API
   server gives) are learnt on top;
5. with ``--over`` more running jobs, a state over the bound: the time to trim it to fit
   (``scheduler.operator.learning_state.encode_capped``: planned from each part's size, then checked) and
   what it left out, and a new oracle restoring the trimmed state: its time to its first answers (the GPU
   types that lost records are refit then) and how far those answers moved from the writer's.

Run: ``python bench/learning_state.py [--jobs N] [--live N] [--over N]`` (the defaults: about 6 minutes).
"""

from __future__ import annotations

import argparse
import random
import time
import uuid
import zlib
from typing import Any

from scheduler.core.types import Job, PlacementShape
from scheduler.k8s import crd
from scheduler.k8s.fakeapi import FakeKubeApi
from scheduler.operator.learning_state import MAX_BYTES, StateStore, decode, encode, encode_capped
from scheduler.operator.reconcile import Operator, OperatorConfig
from scheduler.oracles.learning import CorrectedOracle
from scheduler.policies import make_policy

MODELS = (
    "resnet50",
    "resnet18",
    "resnet101",
    "vgg16",
    "inception_v3",
    "mobilenet_v2",
    "shufflenet_v2",
    "bert",
    "bert-large",
    "transformer",
    "lstm",
    "gpt2",
    "cyclegan",
    "deepspeech2",
    "yolov3",
    "ncf",
)
PRECISIONS = ("fp32", "amp")
PRODUCTS = {
    "A100": "A100-SXM4-40GB",
    "V100": "Tesla-V100-SXM2-16GB",
    "H100": "NVIDIA-H100-80GB-HBM3",
    "T4": "Tesla-T4",
}
BATCHES = (16, 32, 48, 64, 96, 128, 192, 256)
GPUS = (1, 2, 4, 8)
NS, CM = "perfsched", "learning-state"


def _node(gpu_type: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"n-{gpu_type}", "labels": {"nvidia.com/gpu.product": PRODUCTS[gpu_type]}},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}, "capacity": {"nvidia.com/gpu": "8"}},
    }


def _cluster(n: int, seed: int) -> FakeKubeApi:
    """``n`` finished TrainingJobs, each on one node of its GPU type, completed one second apart."""
    rng = random.Random(seed)
    api = FakeKubeApi(lambda: 1_800_000_000.0)
    for t in PRODUCTS:
        api.add_node(_node(t))
    cold = CorrectedOracle.load()
    combos = [(m, p, t) for m in MODELS for p in PRECISIONS for t in PRODUCTS]
    for i in range(n):
        model, precision, gpu_type = combos[i % len(combos)]
        k = i // len(combos)
        batch, gpus = BATCHES[k % len(BATCHES)], GPUS[(k // len(BATCHES)) % len(GPUS)]
        name = f"j{i:05d}"
        obj: dict[str, Any] = {
            "metadata": {"name": name, "namespace": "ml", "generation": 1},
            "spec": {
                "model": model,
                "batchSize": batch * gpus,
                "precision": precision,
                "work": {"iterations": 1000},
                "replicas": {"min": 1, "max": 1, "gpusPerReplica": gpus},
                "template": {"spec": {"containers": [{"name": "worker", "image": "trainer:1"}]}},
            },
        }
        job = crd.trainingjob_to_job(obj, now=0.0, known_model=lambda m: True)
        assert isinstance(job, Job)
        predicted = cold.throughput([(job, PlacementShape(gpu_type, gpus))])[0]
        minute, second = divmod(i, 60)
        obj["status"] = {
            "phase": "Succeeded",
            "observedThroughput": max(predicted, 1e-3) * rng.uniform(0.6, 1.5),
            "gangGeneration": 1,
            "completionTime": f"2027-01-{1 + minute // 1440:02d}T{minute // 60 % 24:02d}:{minute % 60:02d}:"
            f"{second:02d}Z",
            "placement": {f"{name}-g1-0": f"n-{gpu_type}"},
        }
        api.add_trainingjob(obj)
    return api


def _operator(api: FakeKubeApi, oracle: CorrectedOracle, store: bool) -> Operator:
    config = OperatorConfig(
        learning_state_configmap=CM if store else "",
        learning_state_namespace=NS,
        learning_state_interval_s=1e9,  # this benchmark writes the state itself
    )
    return Operator(api, make_policy("las"), oracle, config=config, known_model=lambda m: True)


def _questions() -> list[tuple[Job, PlacementShape]]:
    return [
        (
            Job(name="q", submit_time=0, total_work=1, model=m, batch_size=256, precision=p),
            PlacementShape(t, 4),
        )
        for m in MODELS
        for p in PRECISIONS
        for t in PRODUCTS
        for shape in (PlacementShape(t, 4),)
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--live", type=int, default=1000, help="live jobs observed for the size figure")
    ap.add_argument("--over", type=int, default=11000, help="live jobs added on top, to go over the bound")
    args = ap.parse_args()
    if args.jobs < 1 or args.live < 0 or args.over < 0:
        ap.error("--jobs must be >= 1, --live and --over >= 0")
    api = _cluster(args.jobs, args.seed)
    print(f"{args.jobs} finished TrainingJobs, {len(MODELS) * len(PRECISIONS) * len(PRODUCTS)} model levels")

    replayed = CorrectedOracle.load()
    op = _operator(api, replayed, store=False)
    t0 = time.perf_counter()
    op.run_round()
    t_replay = time.perf_counter() - t0
    t0 = time.perf_counter()
    op.run_round()
    t_next = time.perf_counter() - t0
    corrector = replayed.corrector
    print(
        f"replay: first round {t_replay:.2f} s ({1000 * t_replay / args.jobs:.1f} ms per job), "
        f"next {t_next:.3f} s"
    )
    print(f"  retired records {len(corrector._retired)}, observations {corrector.observations()}")

    t0 = time.perf_counter()
    live: dict[str, tuple[str, float | None]] = {}
    blob = encode(replayed.state(), live, op._completed)
    t_encode = time.perf_counter() - t0
    raw = len(zlib.decompress(blob))
    print(
        f"state: {len(blob) / 1024:.0f} KiB compressed ({raw / 1024:.0f} KiB JSON), "
        f"bound {MAX_BYTES // 1024} KiB; encode {t_encode:.2f} s"
    )
    assert StateStore(api, NS, CM).write(blob) == "written"

    restored = CorrectedOracle.load()
    op2 = _operator(api, restored, store=True)
    t0 = time.perf_counter()
    op2.run_round()
    t_restore = time.perf_counter() - t0
    q = _questions()
    same = restored.throughput(q) == replayed.throughput(q)
    print(
        f"restore: first round {t_restore:.2f} s, observations {restored.corrector.observations()}, "
        f"answers bit for bit as the replayed oracle's: {same}"
    )
    print(f"first round: replay {t_replay:.2f} s, restore {t_restore:.2f} s ({t_replay / t_restore:.0f}x)")

    # the same state with live jobs: each observed once, at 0.6-1.5x the prediction, as a report would
    rng = random.Random(args.seed + 1)
    _learn_live(restored, live, 0, args.live, rng)
    blob = encode(restored.state(), live, op._completed)
    print(
        f"state with {args.live} live jobs: {len(blob) / 1024:.0f} KiB compressed, "
        f"bound {MAX_BYTES // 1024} KiB"
    )

    # more live jobs, until the state is over the bound: trimmed to fit, then restored
    _learn_live(restored, live, args.live, args.live + args.over, rng)
    state = restored.state()
    t0 = time.perf_counter()
    blob = encode(state, live, op._completed)
    t_plain = time.perf_counter() - t0
    got = encode_capped(state, live, op._completed)
    print(
        f"state with {args.live + args.over} live jobs: {len(blob) / 1024:.0f} KiB compressed "
        f"(encode {t_plain:.2f} s); trimmed to {len(got.blob) / 1024:.0f} KiB in {got.seconds:.2f} s "
        f"({got.encodings} encodings), left out {got.trimmed}, kept {got.records}"
    )
    decoded = decode(got.blob)
    assert not isinstance(decoded, str)
    again = CorrectedOracle.load()
    t0 = time.perf_counter()
    again.restore(decoded.oracle)
    answers = again.throughput(q)  # the GPU types that lost records are refit here
    t_trimmed = time.perf_counter() - t0
    writer = restored.throughput(q)
    moved = sorted(abs(a / w - 1) for a, w in zip(answers, writer, strict=True) if w > 0)
    print(
        f"restore of the trimmed state and its first answers (the GPU types that lost records refit from "
        f"those kept): {t_trimmed:.2f} s; answers on every model level against the writer's: "
        f"{sum(m == 0 for m in moved)} of {len(moved)} identical, median change "
        f"{100 * moved[len(moved) // 2]:.1f}%, largest {100 * moved[-1]:.1f}%"
    )


def _live_questions(n: int) -> list[tuple[Job, PlacementShape]]:
    """The ``n`` live jobs of ``_learn_live`` (name, model, precision) and where each runs."""
    q = _questions()
    out = []
    for i in range(n):
        job, shape = q[i % len(q)]
        out.append(
            (
                Job(
                    name=f"ml/live{i:05d}",
                    submit_time=0,
                    total_work=1,
                    model=job.model,
                    batch_size=256,
                    precision=job.precision,
                ),
                shape,
            )
        )
    return out


def _learn_live(
    oracle: CorrectedOracle,
    live: dict[str, tuple[str, float | None]],
    first: int,
    end: int,
    rng: random.Random,
) -> None:
    """Live jobs ``first`` .. ``end`` - 1 each report once, at 0.6-1.5x the oracle's answer for its model
    level before them (asked once per level: asking after each report would refit the GPU type each
    time); each gets a random uid (as the API server gives: they do not compress) and its report time in
    ``live``."""
    levels = _questions()
    said = dict(zip(levels, oracle.throughput(levels), strict=True))
    for i, (job, shape) in enumerate(_live_questions(end)[first:], start=first):
        level = levels[i % len(levels)]
        oracle.observe(job, shape, said[level] * rng.uniform(0.6, 1.5))
        live[job.name] = (str(uuid.UUID(int=rng.getrandbits(128), version=4)), 1_800_000_000.0 + i)


if __name__ == "__main__":
    main()
