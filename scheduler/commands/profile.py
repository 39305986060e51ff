"""``perfsched profile``: a model -> the operator profile of one training step (docs/profile.md).

CLI command module (I/O: reads the model file or config, writes the JSON document to ``--out`` or
stdout, a one-line summary to stderr). Exactly one of ``--torch FILE.py:FACTORY`` (with
``--input-shape``), ``--zoo NAME`` or ``--llm CONFIG.json``. PyTorch is needed by ``--torch`` only, and
then from this Python or from ``$PERFSCHED_TORCH_PYTHON`` (default ``/usr/bin/python3``) in a subprocess.
perfmodel's ``ProfileError`` becomes ``ConfigError`` (one line, exit 2).
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from scheduler.core.errors import ConfigError


def profile(
    torch: str = typer.Option(
        None,
        "--torch",
        help="FILE.py:FACTORY: a Python file and the function in it that builds an nn.Module.",
    ),
    zoo: str = typer.Option(None, "--zoo", help="A zoo model name (resnet50, bert, llama3-8b, ...)."),
    llm: str = typer.Option(
        None, "--llm", help="A transformer's config.json (HuggingFace keys, or layers/hidden/heads/...)."
    ),
    input_shape: str = typer.Option(
        None, "--input-shape", help="--torch: one sample's input shape without the batch, e.g. 3,224,224."
    ),
    batch_size: int = typer.Option(
        None,
        "--batch-size",
        help="Per-GPU micro-batch the operators are counted at [default: 32 for --torch, the zoo "
        "table's for --zoo, 1 for --llm].",
    ),
    sequence_length: int = typer.Option(
        None, "--sequence-length", help="--llm / zoo transformers: tokens per sample [default: the config's]."
    ),
    optimizer: str = typer.Option("adamw", "--optimizer", help="adamw | adam | sgd-momentum | sgd."),
    name: str = typer.Option(None, "--name", help="Model name recorded in the profile."),
    out: str = typer.Option(None, "--out", help="Write the profile here [default: stdout]."),
) -> None:
    """Count the operators of one training step (forward, backward, optimizer): shapes, FLOPs and bytes
    per operator, without a GPU and without weights."""
    from perfmodel.errors import ProfileError
    from perfmodel.profile import dump_profile
    from perfmodel.profiling import parse_shape, profile_llm, profile_torch, profile_zoo

    chosen = [f for f, v in (("--torch", torch), ("--zoo", zoo), ("--llm", llm)) if v is not None]
    if len(chosen) != 1:
        raise ConfigError(
            "give exactly one of --torch FILE.py:FACTORY, --zoo NAME, --llm CONFIG.json"
            + (f" (got {', '.join(chosen)})" if chosen else "")
        )
    if input_shape is not None and torch is None:
        raise ConfigError("--input-shape goes with --torch")
    try:
        if torch is not None:
            if input_shape is None:
                raise ConfigError("--torch needs --input-shape (one sample's shape, e.g. 3,224,224)")
            if sequence_length is not None:
                raise ConfigError("--sequence-length goes with --llm or --zoo")
            prof = profile_torch(torch, parse_shape(input_shape), batch_size or 32, optimizer, name)
        elif zoo is not None:
            prof = profile_zoo(zoo, batch_size, optimizer, sequence_length)
        else:
            prof = profile_llm(Path(llm), batch_size or 1, sequence_length, optimizer, name)
    except ProfileError as exc:
        raise ConfigError(str(exc)) from None
    text = dump_profile(prof)
    if out is not None:
        try:
            Path(out).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--out {out}: {exc.strerror or exc}") from None
    else:
        sys.stdout.write(text)
    typer.echo(
        f"{prof.model.name}: {len(prof.operators)} operators, {prof.model.parameters:,} parameters, "
        f"{prof.train_flops_per_sample:.4g} training FLOPs per sample at batch {prof.batch_size}",
        err=True,
    )


def register(app: typer.Typer) -> None:
    """Add ``profile`` to the CLI."""
    app.command("profile")(profile)
