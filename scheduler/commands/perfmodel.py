"""``perfsched predict`` and ``perfsched perfmodel train``: the throughput predictor on the command line.

CLI command module (I/O: reads CSV files and the model file, writes to stdout). ``predict`` answers one
(job, placement) question from flags, or many from ``--input rows.csv`` (columns named like the flags;
each row is written back with its prediction, or with an ``error`` column when it cannot be predicted).
``--observed obs.csv`` (the same columns plus ``observed_samples_per_s``) first feeds measured runs through
``perfmodel.online.OnlineCorrector``, the code path the operator uses. ``perfmodel train`` retrains the
shipped model from ``../shared/throughput``. perfmodel's own errors become ``ConfigError`` (exit 2).
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from scheduler.core.errors import ConfigError

if TYPE_CHECKING:
    from perfmodel.features import HardwareFeatures, JobFeatures
    from perfmodel.online import OnlineCorrector
    from perfmodel.predictor import Predictions

PRED_COLUMNS = (
    "pred_samples_per_s",
    "pred_iters_per_s",
    "pred_samples_per_s_low",
    "pred_samples_per_s_high",
    "pred_iters_per_s_low",
    "pred_iters_per_s_high",
    "low_confidence",
    "error",
)


def _read_csv(path: Path, what: str) -> tuple[list[str], list[dict[str, str]]]:
    try:
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh)
            rows = list(reader)
            fields = list(reader.fieldnames or [])
    except FileNotFoundError:
        raise ConfigError(f"{what} {path}: file not found") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError(f"{what} {path}: cannot read CSV ({exc})") from exc
    if not fields:
        raise ConfigError(f"{what} {path}: empty file (needs a header row)")
    return fields, rows


def _load_corrector(observed: Path | None) -> OnlineCorrector:
    from perfmodel.errors import PerfModelError
    from perfmodel.features import parse_row
    from perfmodel.online import OnlineCorrector
    from perfmodel.predictor import Predictor

    try:
        corrector = OnlineCorrector(Predictor.load())
    except PerfModelError as exc:
        raise ConfigError(str(exc)) from exc
    if observed is None:
        return corrector
    fields, rows = _read_csv(observed, "--observed")
    if "observed_samples_per_s" not in fields:
        raise ConfigError(f"--observed {observed}: needs an observed_samples_per_s column")
    for line, row in enumerate(rows, start=2):
        try:
            job, hw = parse_row(row)
            text = (row.get("observed_samples_per_s") or "").strip()
            try:
                value = float(text)
            except ValueError:
                raise ConfigError(
                    f"--observed {observed}: line {line}: observed_samples_per_s: not a number: {text!r}"
                ) from None
            corrector.observe(job, hw, value)
        except PerfModelError as exc:
            raise ConfigError(f"--observed {observed}: line {line}: {exc}") from exc
    return corrector


def _as_flag_message(message: str) -> str:
    """``batch_size: must be > 0`` -> ``--batch-size: must be > 0`` (CSV column names are the flags)."""
    from perfmodel.features import ROW_COLUMNS

    column, sep, rest = message.partition(":")
    if sep and column == "gpu_type":
        return f"--gpu-product:{rest}"
    if sep and column in ROW_COLUMNS:
        flag = "--gpu-product" if column == "gpu_product" else "--" + column.replace("_", "-")
        return f"{flag}:{rest}"
    return message


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def _result_dict(p: Predictions, k: int) -> dict[str, Any]:
    return {
        "pred_samples_per_s": p.samples_per_s[k],
        "pred_iters_per_s": p.iters_per_s[k],
        "pred_samples_per_s_low": p.low[k],
        "pred_samples_per_s_high": p.high[k],
        "pred_iters_per_s_low": p.iters_low[k],
        "pred_iters_per_s_high": p.iters_high[k],
        "low_confidence": p.low_confidence[k],
    }


def _predict_rows(
    corrector: OnlineCorrector, parsed: list[tuple[JobFeatures, HardwareFeatures] | str]
) -> list[dict[str, Any]]:
    """Predict every parsed row; a row given as a string is that row's error message."""
    good = [(i, r) for i, r in enumerate(parsed) if not isinstance(r, str)]
    preds = corrector.predict([r for _, r in good]) if good else None
    out: list[dict[str, Any]] = [{"error": r} if isinstance(r, str) else {} for r in parsed]
    for k, (i, _) in enumerate(good):
        assert preds is not None
        out[i] = {**_result_dict(preds, k), "error": ""}
    return out


def _predict_file(corrector: OnlineCorrector, path: Path, as_json: bool) -> None:
    from perfmodel.errors import PerfModelError
    from perfmodel.features import parse_row, resolve

    fields, rows = _read_csv(path, "--input")
    parsed: list[tuple[JobFeatures, HardwareFeatures] | str] = []
    for row in rows:
        try:
            pair = parse_row(row)
            resolve(*pair)  # surface unknown GPUs and inconsistent placements as this row's error
            parsed.append(pair)
        except PerfModelError as exc:
            parsed.append(str(exc))
    results = _predict_rows(corrector, parsed)
    merged = [{**row, **res} for row, res in zip(rows, results, strict=True)]
    if as_json:
        typer.echo(json.dumps(merged, indent=2))
        return
    columns = [c for c in fields if c not in PRED_COLUMNS] + list(PRED_COLUMNS)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for row in merged:
        writer.writerow(
            {
                k: (_fmt(v) if isinstance(v, float) else str(v).lower() if isinstance(v, bool) else v)
                for k, v in row.items()
            }
        )
    typer.echo(buf.getvalue(), nl=False)
    errors = sum(1 for r in results if r.get("error"))
    if errors:
        typer.echo(f"perfsched predict: {errors} of {len(rows)} rows could not be predicted", err=True)


def register(app: typer.Typer) -> None:
    @app.command("predict")
    def predict(
        model: str = typer.Option("", "--model", help="Zoo model name (resnet50, bert, gpt2, ...)."),
        params: float = typer.Option(None, "--params", help="Parameter count (replaces a zoo model)."),
        flops_per_sample: float = typer.Option(
            None, "--flops-per-sample", help="Training FLOPs per sample (with --params)."
        ),
        dataset: str = typer.Option("", "--dataset", help="Dataset (cifar10, imagenet, squad, ...)."),
        batch_size: int = typer.Option(None, "--batch-size", help="Global batch size (all GPUs)."),
        gpu_product: str = typer.Option(
            "", "--gpu-product", help="nvidia.com/gpu.product value (or canonical GPU type, e.g. A100)."
        ),
        gpus: int = typer.Option(1, "--gpus", help="Number of GPUs."),
        gpus_per_node: int = typer.Option(None, "--gpus-per-node", help="GPUs per node [default: --gpus]."),
        interconnect: str = typer.Option(
            "", "--interconnect", help="nvlink | pcie inside a node [default: nvlink where the GPU has it]."
        ),
        network_gbps: float = typer.Option(100.0, "--network-gbps", help="Network between nodes, Gb/s."),
        precision: str = typer.Option("fp32", "--precision", help="fp32 | amp | fp16 | bf16."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
        input_csv: str = typer.Option(
            None, "--input", help="CSV of rows to predict (columns named like the flags)."
        ),
        observed: str = typer.Option(
            None, "--observed", help="CSV of observed runs (flag columns + observed_samples_per_s)."
        ),
    ) -> None:
        """Predict training throughput (samples/s, iterations/s and an ~80% interval) of a job placement."""
        from perfmodel.errors import PerfModelError
        from perfmodel.features import parse_row, resolve

        corrector = _load_corrector(Path(observed) if observed else None)
        if input_csv:
            _predict_file(corrector, Path(input_csv), as_json)
            return
        row = {
            "model": model,
            "dataset": dataset,
            "batch_size": "" if batch_size is None else str(batch_size),
            "gpu_product": gpu_product,
            "gpus": str(gpus),
            "gpus_per_node": "" if gpus_per_node is None else str(gpus_per_node),
            "interconnect": interconnect,
            "network_gbps": str(network_gbps),
            "precision": precision,
            "params": "" if params is None else str(params),
            "flops_per_sample": "" if flops_per_sample is None else str(flops_per_sample),
        }
        try:
            job, hw = parse_row(row)
            r = resolve(job, hw)
            p = corrector.predict([(job, hw)])
        except PerfModelError as exc:
            raise ConfigError(_as_flag_message(str(exc))) from exc
        result = {
            "model": r.model,
            "dataset": r.dataset,
            "batch_size": r.batch_size,
            "per_gpu_batch": r.local_batch,
            "precision": r.precision,
            "gpu_product": gpu_product,
            "gpu_type": r.spec.gpu_type,
            "gpus": r.num_gpus,
            "gpus_per_node": r.gpus_per_node,
            "nodes": r.num_nodes,
            "interconnect": r.interconnect,
            "network_gbps": r.network_gbps,
            **_result_dict(p, 0),
        }
        if as_json:
            typer.echo(json.dumps(result, indent=2))
            return
        where = f"{r.num_gpus} x {r.spec.gpu_type} ({gpu_product})"
        nodes = f"{r.num_nodes} node{'s' if r.num_nodes > 1 else ''}"
        typer.echo(
            f"{r.model} on {r.dataset or 'its default dataset'}, global batch {r.batch_size} "
            f"({r.local_batch:g} per GPU), {r.precision}"
        )
        typer.echo(
            f"placement: {where}, {nodes} x {r.gpus_per_node} GPUs, {r.interconnect}, {r.network_gbps:g} Gb/s"
        )
        typer.echo(
            f"predicted: {p.samples_per_s[0]:.1f} samples/s (80% interval {p.low[0]:.1f} - {p.high[0]:.1f})"
        )
        typer.echo(
            f"           {p.iters_per_s[0]:.3f} iterations/s ({p.iters_low[0]:.3f} - {p.iters_high[0]:.3f})"
        )
        if p.low_confidence[0]:
            typer.echo("note: low confidence (model or GPU not in the catalogue)")

    perfmodel_app = typer.Typer(
        help="The throughput predictor's shipped model: retrain it.", no_args_is_help=True
    )
    app.add_typer(perfmodel_app, name="perfmodel")

    @perfmodel_app.command("train")
    def train(
        shared_dir: str = typer.Option(
            "../shared/throughput",
            "--shared-dir",
            help="Directory with throughput_isolated_tidy.csv.gz.",
        ),
        out_dir: str = typer.Option(
            None,
            "--out-dir",
            help="Where to write predictor.json and measurements.csv.gz [default: the package].",
        ),
        seed: int = typer.Option(0, "--seed", help="Random seed (same seed and data give the same model)."),
        threads: int = typer.Option(1, "--threads", help="XGBoost threads (1 = reproducible bytes)."),
    ) -> None:
        """Retrain the shipped predictor from the measured tables (permissively licensed sources only)."""
        from perfmodel.errors import PerfModelError
        from perfmodel.train import train as run_train

        if threads <= 0:
            raise ConfigError(f"--threads must be > 0, got {threads}")
        if not (Path(shared_dir) / "throughput_isolated_tidy.csv.gz").is_file():
            raise ConfigError(f"--shared-dir {shared_dir}: throughput_isolated_tidy.csv.gz not found there")
        try:
            report = run_train(
                Path(shared_dir), Path(out_dir) if out_dir else None, seed=seed, nthread=threads
            )
        except PerfModelError as exc:
            raise ConfigError(str(exc)) from exc
        typer.echo(
            f"trained on {report.rows} configurations; out-of-fold MRE {100 * report.oof_mre:.1f}%, "
            f"interval ratios {math.exp(report.q_low):.3f}..{math.exp(report.q_high):.3f}"
        )
        typer.echo(f"wrote {report.model_path} and {report.table_path}")
        sys.stdout.flush()
