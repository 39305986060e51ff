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
    from perfmodel.predictions import Predictions

#: Columns (and flags) of an LLM job beyond ``perfmodel.features.ROW_COLUMNS``.
LLM_COLUMNS = ("sequence_length", "sharding", "micro_batch", "activation_checkpointing")

PRED_COLUMNS = (
    "pred_samples_per_s",
    "pred_iters_per_s",
    "pred_samples_per_s_low",
    "pred_samples_per_s_high",
    "pred_iters_per_s_low",
    "pred_iters_per_s_high",
    "low_confidence",
    "memory_gib_per_gpu",
    "fits",
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


def _parse(row: dict[str, str]) -> tuple[JobFeatures, HardwareFeatures]:
    """``perfmodel.features.parse_row`` plus the LLM columns: an LLM job (``perfmodel.llm.treat_as_llm``: a
    zoo LLM, a sequence length, or LLM columns on a model outside the zoo) becomes an ``LLMJobFeatures``; a
    zoo model that is not an LLM stays a data-parallel job. ``InvalidInputError`` names the column."""
    from perfmodel.errors import InvalidInputError
    from perfmodel.features import parse_row
    from perfmodel.llm import LLMJobFeatures, treat_as_llm
    from perfmodel.sharding import parse_sharding
    from perfmodel.zoo import llm_arch

    text = {c: (row.get(c) or "").strip() for c in LLM_COLUMNS}
    model = (row.get("model") or "").strip()
    arch = llm_arch(model)
    others = any(text[c] for c in ("sharding", "micro_batch", "activation_checkpointing"))
    if not treat_as_llm(model, 1 if text["sequence_length"] else None, others):
        parse_sharding(text["sharding"])  # still a bad spec is an error, even where it changes nothing
        return parse_row(row)

    def positive(column: str) -> int | None:
        if not text[column]:
            return None
        try:
            value = int(text[column])
        except ValueError:
            raise InvalidInputError(f"{column}: not an integer: {text[column]!r}") from None
        if value <= 0:
            raise InvalidInputError(f"{column}: must be > 0, got {value}")
        return value

    seq = positive("sequence_length")
    sharding = parse_sharding(text["sharding"])
    micro = positive("micro_batch")
    ac_text = text["activation_checkpointing"].lower()
    if ac_text not in ("", "true", "false", "1", "0", "yes", "no"):
        raise InvalidInputError(f"activation_checkpointing: must be true or false, got {ac_text!r}")
    given_flops = (row.get("flops_per_sample") or "").strip()
    filled = dict(row)
    if arch is None:
        if not (row.get("params") or "").strip():
            what = f"model {model!r} is not a zoo LLM" if model else "no model"
            raise InvalidInputError(
                f"params: an LLM needs a parameter count ({what}; "
                "give --params, or a zoo LLM such as llama3-8b)"
            )
        if not given_flops:
            # parse_row wants FLOPs for a model outside the zoo: the LLM's own count, from its parameters
            filled["flops_per_sample"] = "1"
    job, hw = parse_row(filled)
    return LLMJobFeatures(
        job.model,
        job.dataset,
        job.batch_size,
        job.precision,
        job.params,
        job.flops_per_sample if given_flops else None,
        sequence_length=seq,
        sharding=str(sharding) if text["sharding"] else "",
        micro_batch=micro,
        activation_checkpointing=ac_text in ("true", "1", "yes"),
    ), hw


def _memory(job: JobFeatures, hw: HardwareFeatures) -> dict[str, Any]:
    """``memory_gib_per_gpu``, ``fits`` and the verdict in words (``perfmodel.memory``)."""
    from perfmodel.memory import estimate_job

    est = estimate_job(job, hw)
    return {
        "memory_gib_per_gpu": round(est.total_gib, 2),
        "fits": est.fits,
        "memory_message": est.message,
        "memory_activations_known": est.activations_known,
    }


def _as_flag_message(message: str) -> str:
    """``batch_size: must be > 0`` -> ``--batch-size: must be > 0`` (CSV column names are the flags)."""
    from perfmodel.features import ROW_COLUMNS

    column, sep, rest = message.partition(":")
    if sep and column == "gpu_type":
        return f"--gpu-product:{rest}"
    if sep and column in (*ROW_COLUMNS, *LLM_COLUMNS):
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
    for k, (i, (job, hw)) in enumerate(good):
        assert preds is not None
        mem = _memory(job, hw)
        out[i] = {
            **_result_dict(preds, k),
            "memory_gib_per_gpu": mem["memory_gib_per_gpu"],
            "fits": mem["fits"],
            "error": "",
        }
    return out


def _predict_file(corrector: OnlineCorrector, path: Path, as_json: bool) -> None:
    from perfmodel.errors import PerfModelError
    from perfmodel.features import resolve
    from perfmodel.llm import is_llm_job, plan

    fields, rows = _read_csv(path, "--input")
    parsed: list[tuple[JobFeatures, HardwareFeatures] | str] = []
    for row in rows:
        try:
            pair = _parse(row)
            # surface unknown GPUs, inconsistent placements and shardings as this row's error
            plan(*pair) if is_llm_job(pair[0]) else resolve(*pair)
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


def _flag_row(**flags: Any) -> dict[str, str]:
    """The flags of one ``perfsched predict`` question as a CSV-style row (the columns ``_parse`` reads)."""

    def text(value: Any) -> str:
        return "" if value is None else str(value)

    row = {k: text(v) for k, v in flags.items()}
    row["activation_checkpointing"] = "true" if flags.get("activation_checkpointing") else ""
    return row


def _llm_fields(llm_plan: Any, p: Predictions) -> dict[str, Any]:
    """An LLM job's plan (sequence, sharding, accumulation, FLOPs) and its tokens/s; {} for other jobs."""
    if llm_plan is None:
        return {}
    return {
        "sequence_length": llm_plan.sequence_length,
        "sharding": str(llm_plan.sharding),
        "micro_batch": llm_plan.micro_batch,
        "grad_accumulation": llm_plan.grad_accumulation,
        "data_parallel": llm_plan.data_parallel,
        "activation_checkpointing": llm_plan.activation_checkpointing,
        "params": llm_plan.params_total,
        "flops_per_token": llm_plan.flops_per_token,
        "pred_tokens_per_s": p.samples_per_s[0] * llm_plan.sequence_length,
    }


def _predict_one(corrector: OnlineCorrector, row: dict[str, str]) -> tuple[dict[str, Any], Any, Any]:
    """One question from flags: (the JSON result, the resolved row, the LLM plan or None);
    ``ConfigError`` naming the flag on bad input."""
    from perfmodel.errors import PerfModelError
    from perfmodel.features import resolve
    from perfmodel.llm import is_llm_job, plan

    try:
        job, hw = _parse(row)
        llm_plan = plan(job, hw) if is_llm_job(job) else None
        r = resolve(job, hw)
        p = corrector.predict([(job, hw)])
        memory = _memory(job, hw)
    except PerfModelError as exc:
        raise ConfigError(_as_flag_message(str(exc))) from exc
    result = {
        "model": r.model,
        "dataset": r.dataset,
        "batch_size": r.batch_size,
        "per_gpu_batch": r.local_batch,
        "precision": r.precision,
        "gpu_product": row["gpu_product"],
        "gpu_type": r.spec.gpu_type,
        "gpus": r.num_gpus,
        "gpus_per_node": r.gpus_per_node,
        "nodes": r.num_nodes,
        "interconnect": r.interconnect,
        "network_gbps": r.network_gbps,
        **_llm_fields(llm_plan, p),
        **_result_dict(p, 0),
        **memory,
    }
    return result, r, llm_plan


def _echo_text(result: dict[str, Any], r: Any, llm_plan: Any) -> None:
    """``perfsched predict``'s answer in words (``result`` from ``_predict_one``)."""
    where = f"{r.num_gpus} x {r.spec.gpu_type} ({result['gpu_product']})"
    nodes = f"{r.num_nodes} node{'s' if r.num_nodes > 1 else ''}"
    typer.echo(
        f"{r.model} on {r.dataset or 'its default dataset'}, global batch {r.batch_size} "
        f"({r.local_batch:g} per GPU), {r.precision}"
    )
    typer.echo(
        f"placement: {where}, {nodes} x {r.gpus_per_node} GPUs, {r.interconnect}, {r.network_gbps:g} Gb/s"
    )
    s, lo, hi = (
        result["pred_samples_per_s"],
        result["pred_samples_per_s_low"],
        result["pred_samples_per_s_high"],
    )
    typer.echo(f"predicted: {s:.1f} samples/s (80% interval {lo:.1f} - {hi:.1f})")
    it, ilo, ihi = result["pred_iters_per_s"], result["pred_iters_per_s_low"], result["pred_iters_per_s_high"]
    typer.echo(f"           {it:.3f} iterations/s ({ilo:.3f} - {ihi:.3f})")
    if llm_plan is not None:
        typer.echo(
            f"LLM: sequence {llm_plan.sequence_length}, {llm_plan.sharding}, micro-batch "
            f"{llm_plan.micro_batch} x {llm_plan.grad_accumulation} accumulation steps: "
            f"{result['pred_tokens_per_s']:.0f} tokens/s"
        )
    typer.echo(f"memory: {result['memory_message']}")
    if result["low_confidence"]:
        typer.echo("note: low confidence (model or GPU not in the catalogue)")


def _predict_profile(path: Path, row: dict[str, str], as_json: bool) -> None:
    """``perfsched predict --profile``: compose the job from its operator profile (``perfmodel.compose``)."""
    from perfmodel.compose import compose_interval
    from perfmodel.errors import PerfModelError
    from perfmodel.features import parse_row
    from perfmodel.kernels import default_cost_model
    from perfmodel.profile import load_profile

    try:
        prof = load_profile(path)
    except PerfModelError as exc:
        raise ConfigError(f"--profile: {exc}") from exc
    try:
        _, hw = parse_row(
            {
                **row,
                "model": prof.model.name,
                "params": str(max(prof.model.parameters, 1)),
                "flops_per_sample": str(max(prof.train_flops_per_sample, 1.0)),
            }
        )
        micro = int(row["micro_batch"]) if row.get("micro_batch") else None
        precision = row.get("precision") or "fp32"
        batch = int(row["batch_size"]) if row.get("batch_size") else 0
        p, low, high = compose_interval(
            prof,
            hw,
            precision,
            batch,
            default_cost_model(),
            row.get("sharding") or "ddp",
            micro,
            stack=row.get("stack") or "research",
        )
    except PerfModelError as exc:
        raise ConfigError(_as_flag_message(str(exc))) from exc
    step = p.step
    result = {
        "model": prof.model.name,
        "route": "operators",
        "batch_size": p.global_batch,
        "per_gpu_batch": p.micro_batch * p.grad_accumulation,
        "micro_batch": p.micro_batch,
        "grad_accumulation": p.grad_accumulation,
        "precision": precision,
        "matmul_dtype": p.matmul_dtype,
        "conv_dtype": p.conv_dtype,
        "other_dtype": p.other_dtype,
        "sharding": p.sharding,
        "gpu_product": row["gpu_product"],
        "gpu_type": p.gpu_type,
        "gpus": hw.num_gpus,
        "gpus_per_node": p.gpus_per_node,
        "nodes": hw.num_nodes,
        "pred_samples_per_s": p.samples_per_s,
        "pred_iters_per_s": p.iters_per_s,
        "pred_samples_per_s_low": low,
        "pred_samples_per_s_high": high,
        "pred_iters_per_s_low": low / p.global_batch,
        "pred_iters_per_s_high": high / p.global_batch,
        "low_confidence": p.low_confidence,
        "step_s": step.step_s,
        "forward_s": step.forward_s,
        "backward_s": step.backward_s,
        "optimizer_s": step.optimizer_s,
        "communication_s": step.communication_s,
        "exposed_communication_s": step.exposed_communication_s,
        "compute_by_class_s": dict(step.by_class_s),
    }
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    typer.echo(
        f"{prof.model.name} (operator profile, {len(prof.operators)} operators), global batch "
        f"{p.global_batch} ({p.micro_batch} x {p.grad_accumulation} per GPU), {precision} "
        f"(matmuls {p.matmul_dtype}, convolutions {p.conv_dtype}, other tensors {p.other_dtype}), "
        f"{p.sharding}"
    )
    typer.echo(f"placement: {hw.num_gpus} x {p.gpu_type} ({row['gpu_product']}), {hw.num_nodes} node(s)")
    typer.echo(f"predicted: {p.samples_per_s:.1f} samples/s (80% interval {low:.1f} - {high:.1f})")
    typer.echo(
        f"step {step.step_s * 1e3:.2f} ms: forward {step.forward_s * 1e3:.2f}, backward "
        f"{step.backward_s * 1e3:.2f}, optimizer {step.optimizer_s * 1e3:.2f}, exposed communication "
        f"{step.exposed_communication_s * 1e3:.2f} (of {step.communication_s * 1e3:.2f})"
    )
    if p.low_confidence:
        typer.echo("note: low confidence (GPU not in the catalogue)")


# The precisions the predictor takes (``perfmodel.gpus.PRECISIONS``; a test checks the two agree).
PRECISION_HELP = (
    "fp32 | tf32 | amp | fp16 | bf16 | fp8. fp32 on Ampere and newer runs convolutions in TF32 (PyTorch's "
    "default) and matmuls as --stack does (FP32 on research, TF32 in NVIDIA's containers: vendor, mlperf, "
    "llm); tf32 = TF32 tensor cores everywhere; amp = fp16 autocast; fp8 = Transformer Engine FP8."
)
STACK_HELP = (
    "research | vendor | mlperf | llm: the job's software stack. research = plain PyTorch; vendor = "
    "NVIDIA's PyTorch containers and tuned examples (DeepLearningExamples); mlperf = MLPerf submissions; "
    "llm = LLM training frameworks (llm-foundry, Megatron)."
)


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
    precision: str = typer.Option("fp32", "--precision", help=PRECISION_HELP),
    stack: str = typer.Option("research", "--stack", help=STACK_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    input_csv: str = typer.Option(
        None, "--input", help="CSV of rows to predict (columns named like the flags)."
    ),
    observed: str = typer.Option(
        None, "--observed", help="CSV of observed runs (flag columns + observed_samples_per_s)."
    ),
    sequence_length: int = typer.Option(
        None, "--sequence-length", help="LLM: tokens per sample [default: the zoo model's]."
    ),
    sharding: str = typer.Option(
        "", "--sharding", help="LLM: ddp | fsdp (zero3) | tp<N>xpp<M>[xcp<K>] [default: fsdp]."
    ),
    micro_batch: int = typer.Option(
        None, "--micro-batch", help="LLM: sequences per GPU per forward [default: no accumulation]."
    ),
    activation_checkpointing: bool = typer.Option(
        False, "--activation-checkpointing", help="LLM: recompute activations in the backward pass."
    ),
    profile: str = typer.Option(
        None,
        "--profile",
        help="Operator profile JSON (perfsched profile): predict from its operators instead of --model.",
    ),
) -> None:
    """Predict training throughput (samples/s, iterations/s and an ~80% interval) of a job placement,
    and its peak memory per GPU (``memory_gib_per_gpu``, ``fits``)."""
    if profile:
        if model or params is not None or input_csv or observed:
            raise ConfigError(
                "--profile: give the model by its profile alone (not with --model, --params, "
                "--input or --observed)"
            )
        _predict_profile(
            Path(profile),
            _flag_row(
                batch_size=batch_size,
                gpu_product=gpu_product,
                gpus=gpus,
                gpus_per_node=gpus_per_node,
                interconnect=interconnect,
                network_gbps=network_gbps,
                precision=precision,
                stack=stack,
                sharding=sharding,
                micro_batch=micro_batch,
            ),
            as_json,
        )
        return
    corrector = _load_corrector(Path(observed) if observed else None)
    if input_csv:
        _predict_file(corrector, Path(input_csv), as_json)
        return
    row = _flag_row(
        model=model,
        dataset=dataset,
        batch_size=batch_size,
        gpu_product=gpu_product,
        gpus=gpus,
        gpus_per_node=gpus_per_node,
        interconnect=interconnect,
        network_gbps=network_gbps,
        precision=precision,
        stack=stack,
        params=params,
        flops_per_sample=flops_per_sample,
        sequence_length=sequence_length,
        sharding=sharding,
        micro_batch=micro_batch,
        activation_checkpointing=activation_checkpointing,
    )
    result, r, llm_plan = _predict_one(corrector, row)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    _echo_text(result, r, llm_plan)


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
        report = run_train(Path(shared_dir), Path(out_dir) if out_dir else None, seed=seed, nthread=threads)
    except PerfModelError as exc:
        raise ConfigError(str(exc)) from exc
    typer.echo(
        f"trained on {report.rows} configurations; out-of-fold MRE {100 * report.oof_mre:.1f}%, "
        f"interval ratios {math.exp(report.q_low):.3f}..{math.exp(report.q_high):.3f}"
    )
    typer.echo(f"wrote {report.model_path} and {report.table_path}")
    sys.stdout.flush()


def register(app: typer.Typer) -> None:
    """Add ``predict`` and ``perfmodel train`` to the CLI."""
    app.command("predict")(predict)
    perfmodel_app = typer.Typer(
        help="The throughput predictor's shipped model: retrain it.", no_args_is_help=True
    )
    app.add_typer(perfmodel_app, name="perfmodel")
    perfmodel_app.command("train")(train)
