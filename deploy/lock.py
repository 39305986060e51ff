"""The project's one dependency lock (``uv.lock``): check it, update it, export the image's pin list.

``uv.lock`` pins every package of the development/test venv and of the container image, resolved by uv for
CPython >= 3.11 on Linux (``[tool.uv] environments`` in pyproject.toml). The Makefile installs the venv
from it (``uv sync --locked``), and the Dockerfile installs ``deploy/image/requirements.lock``, which is
exported from it (runtime packages only). Nothing is resolved against the package index except by
``make lock``, so a release on PyPI never changes what a fresh machine installs.

Commands (run with any Python >= 3.11 that has ``packaging``, or pip's vendored copy of it):

``check``
    the lock satisfies pyproject.toml: every requirement (runtime and every extra) has a locked version
    inside its range. One line per conflict, naming the package, the locked version and the requirement.
``update [PACKAGE ...]``
    re-resolve with uv (``uv lock``; with package names, ``uv lock --upgrade-package`` for each: a
    Dependabot-style bump of just those), then export the image's list. Needs the package index; without it,
    one line saying so.
``export``
    write ``deploy/image/requirements.lock`` from ``uv.lock`` (``--check``: exit 1 when it differs).
``verify-env``
    the running interpreter's installed distributions equal the lock's selection for it (runtime + dev
    extra), no more and no fewer.

Exit status: 0 fine, 1 a conflict or a stale file (the message says which), 2 bad usage or uv missing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

try:
    from packaging.markers import Marker
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version
except ImportError:  # a bare venv before the lock is installed has pip, which vendors packaging
    from pip._vendor.packaging.markers import Marker  # type: ignore[assignment]
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[assignment]
    from pip._vendor.packaging.utils import canonicalize_name  # type: ignore[assignment]
    from pip._vendor.packaging.version import Version  # type: ignore[assignment]

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
LOCK = ROOT / "uv.lock"
IMAGE_LOCK = ROOT / "deploy" / "image" / "requirements.lock"
PROJECT = "perfsched"
IMAGE_HEADER = (
    "# Runtime dependencies of the perfsched image, exported from uv.lock by `make lock`\n"
    "# (deploy/lock.py export). Do not edit: change pyproject.toml and run `make lock`.\n"
)


class LockError(Exception):
    """A problem with the lock that a person fixes; the message is one line naming it."""


def locked_versions(lock_text: str) -> dict[str, list[str]]:
    """Canonical package name -> every version the lock pins for it (several where uv forked by Python)."""
    out: dict[str, list[str]] = {}
    for pkg in tomllib.loads(lock_text).get("package", []):
        out.setdefault(canonicalize_name(pkg["name"]), []).append(str(pkg["version"]))
    return out


def requirements(pyproject_text: str) -> list[tuple[str, str]]:
    """(where, requirement string) for the runtime dependencies and every optional extra."""
    project = tomllib.loads(pyproject_text)["project"]
    reqs = [("dependencies", spec) for spec in project.get("dependencies", [])]
    for extra, specs in sorted(project.get("optional-dependencies", {}).items()):
        reqs += [(f"optional-dependencies.{extra}", spec) for spec in specs]
    return reqs


def conflicts(pyproject_text: str, lock_text: str) -> list[str]:
    """One line per requirement of pyproject.toml that the lock does not satisfy (empty when it does)."""
    try:
        pins = locked_versions(lock_text)
    except (tomllib.TOMLDecodeError, KeyError) as exc:
        return [f"uv.lock is not a valid lock file ({exc}): run `make lock`"]
    out = []
    for where, spec in requirements(pyproject_text):
        req = Requirement(spec)
        key = canonicalize_name(req.name)
        versions = pins.get(key)
        if not versions:
            out.append(
                f"uv.lock pins no {req.name}, which pyproject.toml's {where} requires ({spec!r}): "
                "run `make lock`"
            )
            continue
        bad = [v for v in versions if not req.specifier.contains(v, prereleases=True)]
        if bad:
            out.append(
                f"uv.lock pins {req.name} {', '.join(bad)}, outside pyproject.toml's {where} {spec!r}: "
                "run `make lock`"
            )
    return out


def _uv() -> str:
    found = shutil.which(
        "uv", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    )
    if not found:
        raise LockError("uv is not installed: run `make venv` (it installs the locked uv) and retry")
    return found


def _run_uv(args: list[str], what: str) -> str:
    proc = subprocess.run([_uv(), *args], cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("error:")] or lines or [f"exit {proc.returncode}"]
        detail = " ".join(ln for ln in lines if ln.startswith(("cause:", "Because", "error:")))[:400]
        if any("network" in ln.lower() or "connect" in ln.lower() or "dns" in ln.lower() for ln in lines):
            causes = [ln.removeprefix("cause:").strip() for ln in lines if ln.startswith("cause:")]
            raise LockError(f"{what}: cannot reach the package index ({(causes or errors)[0][:300]})")
        raise LockError(f"{what}: {detail or errors[0]}")
    return proc.stdout


def export_text() -> str:
    """The image's pin list: runtime packages of uv.lock, exact versions, environment markers kept."""
    out = _run_uv(
        [
            "export",
            "--frozen",
            "--no-dev",
            "--no-emit-project",
            "--no-hashes",
            "--no-header",
            "--no-annotate",
        ],
        "uv export",
    )
    return IMAGE_HEADER + "".join(
        ln + "\n" for ln in out.splitlines() if ln.strip() and not ln.startswith("#")
    )


def selection(extras: Iterable[str] = ("dev",)) -> dict[str, str]:
    """Canonical name -> version the lock installs into the running interpreter (markers evaluated here)."""
    args = ["export", "--frozen", "--no-emit-project", "--no-hashes", "--no-header", "--no-annotate"]
    for extra in extras:
        args += ["--extra", extra]
    out: dict[str, str] = {}
    for line in _run_uv(args, "uv export").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-")):
            continue
        spec, _, marker = line.partition(";")
        if marker.strip() and not Marker(marker.strip()).evaluate():
            continue
        name, _, version = spec.strip().partition("==")
        out[canonicalize_name(name)] = version.strip()
    return out


def installed() -> dict[str, str]:
    """Canonical name -> version of every distribution in the running interpreter's environment."""
    return {
        canonicalize_name(d.metadata["Name"]): d.version
        for d in metadata.distributions()
        if d.metadata["Name"] and canonicalize_name(d.metadata["Name"]) != PROJECT
    }


def env_differences(want: dict[str, str], have: dict[str, str]) -> list[str]:
    """One line per package whose installed version differs from the lock, is missing, or is extra."""
    out = []
    for name in sorted(set(want) | set(have)):
        w, h = want.get(name), have.get(name)
        if w is None:
            out.append(f"{name} {h} is installed but not in uv.lock")
        elif h is None:
            out.append(f"{name} {w} is in uv.lock but not installed")
        elif Version(w) != Version(h):
            out.append(f"{name} is installed at {h}, uv.lock pins {w}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deploy/lock.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("check", help="the lock satisfies pyproject.toml")
    up = sub.add_parser("update", help="re-resolve (needs the index), then export the image's list")
    up.add_argument("packages", nargs="*", help="upgrade only these packages")
    ex = sub.add_parser("export", help="write deploy/image/requirements.lock")
    ex.add_argument("--check", action="store_true", help="exit 1 when the file differs from uv.lock's export")
    sub.add_parser("verify-env", help="the running environment equals the lock")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "check":
            problems = conflicts(PYPROJECT.read_text(), LOCK.read_text() if LOCK.exists() else "")
            for line in problems:
                print(f"lock: {line}", file=sys.stderr)
            return 1 if problems else 0
        if args.cmd == "update":
            uv_args = ["lock"]
            for pkg in args.packages:
                uv_args += ["--upgrade-package", pkg]
            _run_uv(uv_args, "uv lock")
            IMAGE_LOCK.write_text(export_text())
            print(f"lock: wrote uv.lock and {IMAGE_LOCK.relative_to(ROOT)}")
            return 0
        if args.cmd == "export":
            text = export_text()
            if args.check:
                if not IMAGE_LOCK.exists() or IMAGE_LOCK.read_text() != text:
                    print(
                        f"lock: {IMAGE_LOCK.relative_to(ROOT)} differs from uv.lock: run `make lock`",
                        file=sys.stderr,
                    )
                    return 1
                return 0
            IMAGE_LOCK.write_text(text)
            return 0
        problems = env_differences(selection(), installed())
        for line in problems:
            print(f"lock: {line}", file=sys.stderr)
        return 1 if problems else 0
    except LockError as exc:
        print(f"lock: {exc}", file=sys.stderr)
        return 2 if "not installed" in str(exc) else 1


if __name__ == "__main__":
    sys.exit(main())
