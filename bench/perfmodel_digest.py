"""A digest of the shipped predictor's answers, to show that a change to perfmodel's code left them unchanged.

Every float is hashed through ``repr`` (bit-exact), section by section:
- ``sim``: the simulator's questions (``bench/perfmodel_sim_rows.py``'s workload on gavel-heterogeneous)
  through ``PredictorOracle`` (throughput, interval, memory fit);
- ``table``: every row of the shipped measured table asked as a question (``perfmodel.llm.question_of``)
  through ``Predictor.predict``, LLM rows included;
- ``cli``: a few hundred of those rows through ``perfsched predict --input ROWS.csv --json``;
- ``operators``: zoo and LLM operator profiles (``perfmodel.profiling``) composed on several GPUs and
  placements (``perfmodel.compose.compose_interval``), and the same through ``perfsched predict --profile``.

Run: ``nice python bench/perfmodel_digest.py [--jobs 200]``; two runs on the same code print the same
digests, a change that moves any answer by one bit changes at least one.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

from perfmodel.compose import compose_interval
from perfmodel.features import parse_row
from perfmodel.kernels import default_cost_model
from perfmodel.llm import question_of
from perfmodel.measurements import Measurement, read_table
from perfmodel.predictions import Predictions
from perfmodel.predictor import MODEL_FILE, Predictor
from perfmodel.profile import dump_profile
from perfmodel.profiling import profile_zoo
from perfmodel.truth import TABLE_NAME

DATA = Path(__file__).resolve().parent.parent / "perfmodel" / "data"
assert MODEL_FILE  # the shipped model is what Predictor.load() reads


def _digest(values: Iterable[Any]) -> str:
    h = hashlib.sha256()
    for v in values:
        h.update(repr(v).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


def _flatten(p: Predictions) -> list[Any]:
    return [
        *p.samples_per_s,
        *p.iters_per_s,
        *p.low,
        *p.high,
        *p.iters_low,
        *p.iters_high,
        *p.low_confidence,
    ]


def sim_section(jobs: int) -> tuple[str, int]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from perfmodel_sim_rows import questions

    from scheduler.oracles.predictor import PredictorOracle

    qs = questions("gavel-heterogeneous", jobs, 0)
    oracle = PredictorOracle.load()
    values: list[Any] = list(oracle.throughput(qs))
    values += [x for pair in oracle.throughput_interval(qs) for x in pair]
    values += [repr(m) for m in oracle.memory_fit(qs)]
    return _digest(values), len(qs)


def table_section(rows: Sequence[Measurement]) -> tuple[str, int]:
    qs = [question_of(m) for m in rows]
    p = Predictor.load().predict(qs)
    return _digest(_flatten(p)), len(qs)


def _cli_row(m: Measurement) -> dict[str, str]:
    return {
        "model": m.model,
        "dataset": m.dataset,
        "batch_size": str(m.batch_size),
        "gpu_product": m.gpu_product or m.gpu_type,
        "gpus": str(m.num_gpus),
        "gpus_per_node": str(m.gpus_per_node),
        "interconnect": m.interconnect,
        "network_gbps": str(m.network_gbps),
        "precision": m.precision,
        "stack": m.stack,
        "params": str(m.params) if m.params else "",
        "flops_per_sample": str(m.flops_per_sample) if m.flops_per_sample else "",
        "sequence_length": str(m.seq_len) if m.seq_len else "",
        "sharding": m.sharding if m.seq_len else "",
        "micro_batch": str(m.micro_batch) if m.micro_batch else "",
    }


def _perfsched(args: Sequence[str]) -> str:
    run = subprocess.run(
        [sys.executable, "-c", "import sys; from scheduler.cli import main; main(sys.argv[1:])", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    return f"{run.returncode}\n{run.stdout}\n{run.stderr.strip().splitlines()[-1:] if run.returncode else ''}"


def cli_section(rows: Sequence[Measurement], tmp: Path) -> tuple[str, int]:
    path = tmp / "rows.csv"
    dicts = [_cli_row(m) for m in rows]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(dicts[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(dicts)
    path.write_text(buf.getvalue())
    return _digest([_perfsched(["predict", "--input", str(path), "--json"])]), len(dicts)


PROFILED = (("resnet50", 64), ("bert", 32), ("gpt2", 8), ("transformer", 64), ("llama3-8b", 2))
PLACEMENTS = (
    ("V100", 1, 1, "fp32"),
    ("A100", 8, 8, "amp"),
    ("NVIDIA-H100-80GB-HBM3", 16, 8, "bf16"),
    ("T4", 4, 4, "fp32"),
)


def operators_section(tmp: Path) -> tuple[str, int]:
    cost = default_cost_model()
    values: list[Any] = []
    count = 0
    for name, batch in PROFILED:
        prof = profile_zoo(name, batch)
        path = tmp / f"{name}.json"
        dump_profile(prof, path)
        values.append(prof.train_flops_per_sample)
        for gpu, n, per_node, precision in PLACEMENTS:
            _, hw = parse_row(
                {
                    "model": prof.model.name,
                    "params": str(max(prof.model.parameters, 1)),
                    "flops_per_sample": str(max(prof.train_flops_per_sample, 1.0)),
                    "gpu_product": gpu,
                    "gpus": str(n),
                    "gpus_per_node": str(per_node),
                    "batch_size": str(batch * n),
                }
            )
            for stack in ("research", "vendor"):
                p, low, high = compose_interval(
                    prof, hw, precision, batch * n, cost, "ddp", None, stack=stack
                )
                values += [repr(p), low, high]
                count += 1
        gpu, n, per_node, precision = PLACEMENTS[1]
        values.append(
            _perfsched(
                [
                    "predict",
                    "--profile",
                    str(path),
                    "--gpu-product",
                    gpu,
                    "--gpus",
                    str(n),
                    "--gpus-per-node",
                    str(per_node),
                    "--batch-size",
                    str(batch * n),
                    "--precision",
                    precision,
                    "--json",
                ]
            )
        )
        count += 1
    return _digest(values), count


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--jobs", type=int, default=200, help="simulator jobs whose questions are asked")
    ap.add_argument("--cli-rows", type=int, default=300, help="table rows asked through the CLI")
    a = ap.parse_args(argv)
    rows = read_table(DATA / TABLE_NAME)
    llm_rows = [m for m in rows if m.seq_len]
    other = [m for m in rows if not m.seq_len]
    step = max(1, len(other) // max(1, a.cli_rows - 60))
    cli_rows = other[::step] + llm_rows[:: max(1, len(llm_rows) // 60)]
    sections: dict[str, tuple[str, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        sections["sim"] = sim_section(a.jobs)
        sections["table"] = table_section(rows)
        sections["cli"] = cli_section(cli_rows, Path(tmp))
        sections["operators"] = operators_section(Path(tmp))
    for name, (digest, count) in sections.items():
        print(f"{name:10s} {count:6d} answers  {digest}")
    print(f"{'all':10s} {'':6s}          {_digest(d for d, _ in sections.values())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
