"""Speed of the LLM dispatch in ``Predictor.predict`` and of LLM rows, with a same-run baseline.

- hook: ``Predictor.predict`` (which first checks whether any row is an LLM job) against
  ``Predictor._predict_learned`` (the learned path alone) on the same 100 cached non-LLM rows and on one
  cached row: the cost the LLM dispatch adds to every call.
- LLM rows: 100 LLM rows (5 zoo LLMs x batch x sequence x sharding) through ``Predictor.predict`` with the
  row memo cleared before each call (resolved placements and architecture counts stay memoised, as in a
  running scheduler) and memoised, and one memoised LLM row.

Medians of repeated calls, one thread. Run: ``nice python bench/llm_speed.py``.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")

from perfmodel.features import HardwareFeatures, JobFeatures
from perfmodel.llm import LLMJobFeatures, _iterations
from perfmodel.predictor import Predictor
from perfmodel.zoo import MODELS


def median_us(f: Callable[[], object], n: int) -> float:
    xs = []
    for _ in range(n):
        a = time.perf_counter()
        f()
        xs.append(time.perf_counter() - a)
    return statistics.median(xs) * 1e6


def main() -> None:
    p = Predictor.load()
    rnd = random.Random(0)
    names = [m.name for m in MODELS if m.llm is None]
    rows = [
        (
            JobFeatures(rnd.choice(names), batch_size=rnd.choice([32, 64, 128, 256])),
            HardwareFeatures(rnd.choice(["V100", "A100", "T4", "H100"]), rnd.choice([1, 2, 4, 8])),
        )
        for _ in range(100)
    ]
    p.predict(rows)
    one = rows[:1]
    ours, base = median_us(lambda: p.predict(rows), 2000), median_us(lambda: p._predict_learned(rows), 2000)
    print(
        f"cached 100 rows: predict (with the LLM dispatch) {ours:.1f} us | learned path alone {base:.1f} us"
    )
    ours, base = median_us(lambda: p.predict(one), 20000), median_us(lambda: p._predict_learned(one), 20000)
    print(f"cached 1 row:    predict {ours:.2f} us | learned path alone {base:.2f} us")
    llm_rows = [
        (
            LLMJobFeatures(m, batch_size=b, precision="bf16", sequence_length=s, sharding=sh),
            HardwareFeatures("H100", n, 8, max(1, n // 8), "nvlink", 3200.0),
        )
        for m in ("llama3-8b", "mistral-7b", "qwen2.5-7b", "mpt-7b", "llama3-70b")
        for b in (64, 128)
        for s in (2048, 4096)
        for sh, n in (("fsdp", 8), ("tp2xpp2", 16), ("fsdp", 64), ("ddp", 8), ("tp4", 8))
    ][:100]

    def cold() -> None:
        _iterations.cache_clear()
        p.predict(llm_rows)

    cold_us = median_us(cold, 50)
    warm_us = median_us(lambda: p.predict(llm_rows), 200)
    one_us = median_us(lambda: p.predict(llm_rows[:1]), 2000)
    print(
        f"100 LLM rows: rows not memoised {cold_us:.0f} us (placements and architectures memoised), "
        f"memoised {warm_us:.0f} us; 1 memoised LLM row {one_us:.1f} us"
    )


if __name__ == "__main__":
    main()
