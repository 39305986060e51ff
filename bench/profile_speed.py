"""Speed of ``perfsched profile`` on one CPU core: ResNet-50 and an 8B-parameter LLM config.

Each figure is the wall time of the whole command as a user runs it (a fresh ``perfsched profile``
process: interpreter start, imports, counting, writing the JSON), pinned to one CPU core with
``taskset -c 0``, best of ``--repeat`` runs:

- ``--zoo resnet50`` (the analytic layer table), ``--llm`` with Llama 3 8B's config.json keys (written to a
  temporary file), ``--zoo llama3-8b``;
- ``--torch`` on a ResNet-50 module (``tests/perfmodel/torch_models/models.py``), traced on PyTorch's
  meta device, in a subprocess with ``$PERFSCHED_TORCH_PYTHON`` (default ``/usr/bin/python3``) when
  this Python has no torch; skipped with a note when no Python with torch is found.

Target: each <= 10 s. Prints a table and writes it to ``--out`` (JSON). Run:
``nice python bench/profile_speed.py [--repeat 3] [--out /tmp/profile_speed.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 10.0
LLAMA3_8B = {
    "model_type": "llama",
    "hidden_act": "silu",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
}


def timed(argv: list[str], repeat: int) -> tuple[float, str]:
    """Best wall time of ``perfsched ARGV`` on CPU core 0, and its one-line summary (stderr)."""
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    cmd = [*pin, sys.executable, "-m", "scheduler.cli", *argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    best, summary = float("inf"), ""
    for _ in range(repeat):
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
        dt = time.perf_counter() - t
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed: {proc.stderr.strip()}")
        best, summary = min(best, dt), proc.stderr.strip().splitlines()[-1]
    return best, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    from perfmodel.profiling import DEFAULT_TORCH_PYTHON, torch_available

    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "llama3-8b.json"
        cfg.write_text(json.dumps(LLAMA3_8B), encoding="utf-8")
        out = str(Path(tmp) / "p.json")
        cases = [
            ("zoo resnet50", ["profile", "--zoo", "resnet50", "--out", out]),
            (
                "llm llama3-8b config.json (seq 4096)",
                ["profile", "--llm", str(cfg), "--sequence-length", "4096", "--out", out],
            ),
            ("zoo llama3-8b", ["profile", "--zoo", "llama3-8b", "--out", out]),
        ]
        torch_py = (
            None if torch_available() else os.environ.get("PERFSCHED_TORCH_PYTHON", DEFAULT_TORCH_PYTHON)
        )
        has_torch = torch_py is None or (
            shutil.which(torch_py) is not None
            and subprocess.run([torch_py, "-c", "import torch"], capture_output=True, check=False).returncode
            == 0
        )
        model = ROOT / "tests" / "perfmodel" / "torch_models" / "models.py"
        if has_torch:
            cases.append(
                (
                    "torch resnet50 (meta device, batch 32)",
                    ["profile", "--torch", f"{model}:resnet50", "--input-shape", "3,224,224", "--out", out],
                )
            )
        rows = []
        for label, argv in cases:
            s, summary = timed(argv, a.repeat)
            rows.append({"case": label, "seconds": round(s, 3), "ok": s <= TARGET_S, "summary": summary})
            print(f"{label:42s} {s:7.2f} s  {'<=' if s <= TARGET_S else '>'} {TARGET_S:.0f} s   {summary}")
        if not has_torch:
            print(f"torch resnet50: skipped (no Python with torch: this one or {torch_py})")
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
