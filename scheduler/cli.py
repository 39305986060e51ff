"""The ``perfsched`` command line.

A thin shell: it builds one Typer app and lets every module in ``scheduler.commands`` register its
commands on it (``register(app)``), so each capability owns its own options. Other installed packages add
commands through the entry-point group ``perfsched.commands`` (each entry names a ``register(app)``
function): the developer tooling in ``perfsched_dev`` (``dev-cluster``, ``demo``, ``emulate``) comes in
that way, so the product never imports it and an installation without it (the container image) simply
lacks those commands. Command modules import their heavy dependencies inside the command functions,
which keeps ``perfsched --help`` fast.
User errors (``ConfigError``) print one clear message and exit with code 2, without a traceback.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import sys
from collections.abc import Callable, Sequence

import typer

import scheduler.commands as commands_pkg
from scheduler import __version__
from scheduler.core.errors import ConfigError

log = logging.getLogger(__name__)

#: Entry-point group of command plugins: ``name = "package.module:register"``.
PLUGIN_GROUP = "perfsched.commands"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"perfsched {__version__}")
        raise typer.Exit()


def plugin_registrars() -> list[tuple[str, Callable[[typer.Typer], None]]]:
    """The ``register`` functions of the installed ``perfsched.commands`` entry points, by name.

    An entry point whose package is not installed (the metadata of a full install, the code of a
    product-only one) is skipped; any other import failure of a plugin is a bug and propagates.
    """
    from importlib.metadata import entry_points  # only when plugins are looked for (about 0.02 s CPU)

    found: list[tuple[str, Callable[[typer.Typer], None]]] = []
    for ep in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        try:
            register = ep.load()
        except ModuleNotFoundError as exc:
            package = ep.module.split(".")[0]
            if exc.name is None or exc.name.split(".")[0] != package:
                raise
            log.debug(
                "command plugin %s skipped: %s is not installed",
                ep.name,
                package,
                extra={"plugin": ep.name, "package": package},
            )
            continue
        found.append((ep.name, register))
    return found


#: the ``scheduler.commands`` module that registers each built-in command or command group, so that a
#: command line naming one imports that module alone (``tests/test_cli.py`` checks this against what
#: every module registers)
COMMAND_MODULES = {
    "experiment": "simulate",
    "extender": "extender",
    "jobs": "jobs",
    "operator": "operator",
    "perfmodel": "perfmodel",
    "predict": "perfmodel",
    "profile": "profile",
    "simulate": "simulate",
}


def command_names(app: typer.Typer) -> set[str]:
    """The names of the commands and command groups registered on ``app`` so far."""
    names = {
        c.name or (c.callback.__name__.replace("_", "-") if c.callback else "")
        for c in app.registered_commands
    }
    names.update(g.name for g in app.registered_groups if g.name)
    return names


def _first_command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` invokes (its first argument that is not an option), or None."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_app(argv: Sequence[str] | None = None) -> typer.Typer:
    """Create the CLI app with the commands of every ``scheduler.commands`` module and plugin.

    With ``argv`` naming one of ``scheduler.commands``' own commands (``perfsched simulate ...``), only
    the module that registers it is imported and the plugins are not looked up: that command runs the
    same without the others, whose imports and the installed packages' entry points would cost a short
    command's start-up time."""
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

    command = _first_command(argv) if argv is not None else None
    if command in COMMAND_MODULES:
        importlib.import_module(f"{commands_pkg.__name__}.{COMMAND_MODULES[command]}").register(app)
        return app
    for info in sorted(pkgutil.iter_modules(commands_pkg.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands_pkg.__name__}.{info.name}")
        module.register(app)
    for _name, register in plugin_registrars():
        register(app)
    return app


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``perfsched`` console script."""
    app = build_app(sys.argv[1:] if argv is None else argv)
    try:
        app(args=argv, standalone_mode=True)
    except ConfigError as exc:
        typer.echo(f"perfsched: error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
