"""The developer tooling's CLI commands. Each module defines ``register(app: typer.Typer) -> None`` and is
named by an entry point of the ``perfsched.commands`` group in pyproject.toml, through which
``scheduler.cli`` finds it. Keep heavy imports inside the command functions."""
