"""The perfsched command line starts, lists its commands (its own and those of installed plugins, such as
the developer tooling) and prints its version."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_version_prints_package_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "scheduler.cli", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip().startswith("perfsched 0.")


def _plugin_env(tmp_path: Path, entry_points: str) -> dict[str, str]:
    """A site directory with one installed distribution declaring ``perfsched.commands`` entry points."""
    (tmp_path / "hello_plugin").mkdir()
    (tmp_path / "hello_plugin" / "__init__.py").write_text(
        "import typer\n\n"
        "def register(app: typer.Typer) -> None:\n"
        "    @app.command('hello')\n"
        "    def hello() -> None:\n"
        "        typer.echo('hello from a plugin')\n"
    )
    (tmp_path / "broken_plugin.py").write_text("import a_dependency_nobody_installed\n")
    dist = tmp_path / "hello_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hello-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[perfsched.commands]\n" + entry_points)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO), env.get("PYTHONPATH", "")])
    return env


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_commands_of_an_installed_plugin_are_registered(tmp_path: Path) -> None:
    env = _plugin_env(tmp_path, "hello = hello_plugin:register\n")
    out = _cli("hello", env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "hello from a plugin"
    assert "simulate" in _cli("--help", env=env).stdout


def test_a_plugin_whose_package_is_not_installed_is_left_out(tmp_path: Path) -> None:
    # what the container image sees: the wheel's metadata names perfsched_dev, the image lacks its code
    env = _plugin_env(
        tmp_path, "hello = hello_plugin:register\nghost = a_package_not_installed.commands:register\n"
    )
    out = _cli("--help", env=env)
    assert out.returncode == 0, out.stderr
    assert "hello" in out.stdout and "ghost" not in out.stdout
    assert _cli("ghost", env=env).returncode == 2  # no such command


def test_a_plugin_that_fails_to_import_is_an_error_not_a_missing_command(tmp_path: Path) -> None:
    env = _plugin_env(tmp_path, "broken = broken_plugin:register\n")
    out = _cli("--help", env=env)
    assert out.returncode != 0
    assert "a_dependency_nobody_installed" in out.stderr


def test_the_product_cli_without_the_dev_tooling_has_no_dev_commands(tmp_path: Path) -> None:
    # perfsched_dev made unimportable, as in the image; its entry points (if installed) are then skipped
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n"
        "class _NoDev:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'perfsched_dev':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, _NoDev())\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO), env.get("PYTHONPATH", "")])
    out = _cli("--help", env=env)
    assert out.returncode == 0, out.stderr
    for product in ("extender", "operator", "simulate", "predict"):
        assert product in out.stdout
    for dev in ("dev-cluster", "demo", "emulate"):
        assert f" {dev} " not in out.stdout


def test_command_modules_names_what_each_command_module_registers() -> None:
    """``perfsched <command>`` imports only the module ``COMMAND_MODULES`` names for it: the map must list
    every built-in command with the module that registers it, and nothing else."""
    import importlib
    import pkgutil

    import typer

    import scheduler.commands as commands_pkg
    from scheduler.cli import COMMAND_MODULES, command_names

    registered: dict[str, str] = {}
    for info in pkgutil.iter_modules(commands_pkg.__path__):
        app = typer.Typer()
        importlib.import_module(f"{commands_pkg.__name__}.{info.name}").register(app)
        registered.update(dict.fromkeys(command_names(app), info.name))
    assert registered == COMMAND_MODULES


def test_a_command_line_naming_a_built_in_command_registers_its_module_only() -> None:
    from scheduler.cli import build_app, command_names

    assert command_names(build_app(["simulate", "--jobs", "5"])) == {"simulate", "experiment"}
    assert command_names(build_app(["--version"])) >= {"simulate", "operator", "extender", "predict"}
