"""The ``perfsched`` command line.

A thin shell: it builds one Typer app and lets every module in ``scheduler.commands`` register its
commands on it (``register(app)``), so each capability owns its own options. Command modules import
their heavy dependencies inside the command functions, which keeps ``perfsched --help`` fast.
User errors (``ConfigError``) print one clear message and exit with code 2, without a traceback.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer

import scheduler.commands as commands_pkg
from scheduler import __version__
from scheduler.core.errors import ConfigError


def _version(value: bool) -> None:
    if value:
        typer.echo(f"perfsched {__version__}")
        raise typer.Exit()


def build_app() -> typer.Typer:
    """Create the CLI app with the commands of every ``scheduler.commands`` module registered."""
    app = typer.Typer(
        name="perfsched",
        help="perfsched: performance-model-driven scheduling of deep-learning training jobs on Kubernetes.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
    )

    @app.callback()
    def _root(
        version: bool = typer.Option(
            False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ) -> None:
        """perfsched command line."""

    for info in sorted(pkgutil.iter_modules(commands_pkg.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands_pkg.__name__}.{info.name}")
        module.register(app)
    return app


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``perfsched`` console script."""
    app = build_app()
    try:
        app(args=argv, standalone_mode=True)
    except ConfigError as exc:
        typer.echo(f"perfsched: error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
