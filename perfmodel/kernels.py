"""The shipped per-kernel measurements and the fitted cost model: reading, fitting, writing.

``perfmodel/data/kernels/kernels.tsv.gz`` holds public per-kernel latencies (source and licence on every
row; provenance in that directory's README). ``read_kernel_rows`` turns it into ``opcost.KernelRow``s on
the catalogue's GPU specs; ``default_cost_model`` loads the fitted ``opcost.json`` shipped beside it (once
per process). ``python bench/fit_opcost.py`` refits and rewrites that file (deterministic: the same
table gives the same weights). I/O module: the functions read or write the named files.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

from perfmodel.errors import ModelFileError
from perfmodel.gpus import spec_for_product
from perfmodel.opcost import CostModel, Kernel, KernelRow

TABLE_NAME = "kernels.tsv.gz"
MODEL_NAME = "opcost.json"


def _data_dir() -> Path:
    with resources.as_file(resources.files("perfmodel") / "data" / "kernels") as p:
        return Path(p)


def read_kernel_rows(path: str | Path | None = None) -> list[KernelRow]:
    """Rows of a kernel table (default: the shipped one); a bad row raises ``ModelFileError`` naming it."""
    path = Path(path) if path is not None else _data_dir() / TABLE_NAME
    try:
        text = gzip.decompress(path.read_bytes()).decode()
    except OSError as exc:
        raise ModelFileError(f"{path}: cannot read the kernel table ({exc})") from None
    rows: list[KernelRow] = []
    for i, r in enumerate(csv.DictReader(io.StringIO(text), delimiter="\t"), start=2):
        spec = spec_for_product(r.get("gpu_product", ""))
        if spec is None:
            raise ModelFileError(f"{path}:{i}: unknown gpu_product {r.get('gpu_product')!r}")
        try:
            kernel = Kernel(
                op_class=r["op_class"],
                flops=float(r["flops"]),
                bytes=float(r["bytes"]),
                dtype=r["dtype"],
                m=int(r["m"]),
                n=int(r["n"]),
                k=int(r["k"]),
                batch=int(r["batch"]) if r["op_class"] == "gemm" else 1,
                conv=r["op"] == "conv",
            )
            seconds = float(r["latency_us"]) * 1e-6
        except (KeyError, ValueError) as exc:
            raise ModelFileError(f"{path}:{i}: bad kernel row ({exc})") from None
        if not seconds > 0:
            raise ModelFileError(f"{path}:{i}: latency_us must be > 0")
        rows.append(KernelRow(kernel, spec, seconds, r["source"], r["op"]))
    return rows


def read_cost_model(path: str | Path) -> CostModel:
    """A cost model file (``ModelFileError`` naming the file when missing or malformed)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"{path}: cannot read the cost model ({exc})") from None
    if not isinstance(doc, dict):
        raise ModelFileError(f"{path}: not a JSON object")
    return CostModel.from_json(doc, where=str(path))


@lru_cache(maxsize=1)
def default_cost_model() -> CostModel:
    """The shipped fitted cost model (read once per process)."""
    return read_cost_model(_data_dir() / MODEL_NAME)


def write_cost_model(model: CostModel, path: str | Path | None = None) -> Path:
    """Write a fitted cost model (default: the shipped ``opcost.json`` of the source tree)."""
    out = (
        Path(path) if path is not None else Path(__file__).resolve().parent / "data" / "kernels" / MODEL_NAME
    )
    out.write_text(json.dumps(model.to_json(), indent=1, sort_keys=True) + "\n")
    return out
