"""CLI command modules. Each module defines ``register(app: typer.Typer) -> None``; ``scheduler.cli``
discovers them all. Keep heavy imports inside the command functions."""
