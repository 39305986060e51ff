"""``perfsched emulate --exec``: runs the TrainingJob pods bound to exec nodes as local processes.

A small kubelet for a laptop or a CI machine. Nodes labelled ``perfsched.dev/exec-node=true``
(``perfsched_dev.k8s.execapi.exec_node_manifest``; KWOK does not manage them, the table-driven emulator
leaves their pods alone) are served here: each pod of a
TrainingJob bound to one is started as a process running its first container's ``command`` + ``args``,
with the container's environment (``value``, ``$(VAR)`` references and the downward-API ``fieldRef``s
the operator uses), ``$(VAR)`` expanded in the command as Kubernetes does, a per-pod working directory,
and its volumes as local directories. The pod goes Running when the process starts and Succeeded
(exit 0) or Failed (exit code, last line of the log as the message) when it ends. Deleting the pod
sends SIGTERM to the process group; after the grace period SIGKILL; the pod is removed (grace 0) once
the process is gone, so its GPUs stay taken until then, as with a kubelet.

Local differences from a pod, all because every pod runs on this one machine:

- ``MASTER_ADDR`` is ``127.0.0.1`` and ``MASTER_PORT`` a free port chosen per gang (job + generation);
  ``GLOO_SOCKET_IFNAME=lo`` and ``OMP_NUM_THREADS=1`` unless the pod sets them; ``KUBECONFIG`` points at
  the cluster (the workers report progress with it instead of a service account).
- Volumes: a ``persistentVolumeClaim`` is ``<exec-dir>/<namespace>/pvc/<claim>`` (shared by every pod
  that mounts it, kept across restarts: checkpoints survive), an ``emptyDir`` is per pod, a
  ``hostPath`` is that path; other volume types (service-account tokens, ...) are not provided. Every
  ``mountPath`` (with ``subPath``/``subPathExpr``) in the command, the args and env values is rewritten
  to its local directory.
- Python workers can import ``scheduler.worker``: ``PYTHONPATH`` gets a directory of links to exactly
  the packages perfsched's ``ProgressReporter`` imports, taken from the Python running this emulator
  (``worker_site``); the worker's own packages (PyTorch, numpy) stay its own. The worker must be the
  same Python minor version (compiled extensions such as ``pydantic_core``); Debian's
  ``/usr/bin/python3`` with ``python3-torch`` (3.11) fits perfsched's 3.11 venv.
- The process's output goes to ``<exec-dir>/<namespace>/<pod>/log``.

``ExecEmulator.step()`` is one pass (tests call it with a fake API and clock); ``run`` loops until
stopped and then terminates the processes it started. Impure (processes, files); the API is an
``ExecApi`` so unit tests pass a fake.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from scheduler.core.errors import PerfschedError
from scheduler.k8s import crd
from scheduler.names import LABEL_GENERATION, LABEL_JOB_NAME

log = logging.getLogger(__name__)

DEFAULT_GRACE_S = 30.0
#: seconds a gracefully deleted pod stays (terminated) after its process exits before it is removed: the
#: kubelet writes the final status before it deletes, so watchers see the last progress report
LINGER_S = 1.0
LOCALHOST = "127.0.0.1"
#: modules whose imports the worker site provides (what ``scheduler.worker.ProgressReporter`` needs)
REPORTER_MODULES = ("scheduler.worker", "scheduler.settings", "scheduler.k8s.workload")
#: never linked into a worker's path: the worker's own builds must win (PyTorch is compiled against them)
NEVER_LINKED = frozenset({"numpy", "torch"})

_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class ExecError(PerfschedError):
    """A pod cannot be run as a local process (the message says why; the pod goes Failed with it)."""


class ExecApi(Protocol):
    """What the exec emulator needs from the API (``perfsched_dev.k8s.execapi.KubeExec`` in production)."""

    def exec_nodes(self) -> list[str]: ...

    def mark_node_ready(self, name: str, now_rfc3339: str) -> None: ...

    def job_pods(self, namespace: str = "") -> list[dict[str, Any]]: ...

    def set_pod_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None: ...

    def finish_deletion(self, namespace: str, name: str, uid: str) -> None: ...


# --- pure: a pod spec -> what to run ----------------------------------------------------------------------


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: defined variables are replaced, ``$$`` is ``$``, others stay."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _REF.sub(sub, text)


def _field_ref(pod: Mapping[str, Any], path: str) -> str:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": LOCALHOST,
        "status.hostIP": LOCALHOST,
    }
    if path in simple:
        return str(simple[path])
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    raise ExecError(f"env fieldRef {path!r} is not supported by perfsched emulate --exec")


def container_env(pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
    """The container's declared environment, resolved in order (pure)."""
    env: dict[str, str] = {}
    for item in container.get("env") or []:
        name = str(item.get("name", ""))
        if "value" in item:
            env[name] = expand(str(item.get("value") or ""), env)
        elif (item.get("valueFrom") or {}).get("fieldRef"):
            env[name] = _field_ref(pod, str(item["valueFrom"]["fieldRef"].get("fieldPath", "")))
        elif item.get("valueFrom"):
            kind = next(iter(item["valueFrom"]), "?")
            raise ExecError(f"env {name} from {kind} is not supported by perfsched emulate --exec")
        else:
            env[name] = ""
    return env


@dataclass(frozen=True, slots=True)
class Mount:
    """A container path and the local directory standing in for it."""

    path: str
    local: Path


def volume_dirs(pod: Mapping[str, Any], root: Path) -> dict[str, Path]:
    """Local directory of each volume the emulator provides, by volume name (pure)."""
    meta = pod.get("metadata") or {}
    ns, name = str(meta.get("namespace", "default")), str(meta.get("name", ""))
    out: dict[str, Path] = {}
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        vname = str(vol.get("name", ""))
        if vol.get("persistentVolumeClaim"):
            out[vname] = root / ns / "pvc" / str(vol["persistentVolumeClaim"].get("claimName", vname))
        elif "emptyDir" in vol:
            out[vname] = root / ns / name / "volumes" / vname
        elif vol.get("hostPath"):
            out[vname] = Path(str(vol["hostPath"].get("path", "")))
    return out


def mounts(
    pod: Mapping[str, Any], container: Mapping[str, Any], root: Path, env: Mapping[str, str]
) -> list[Mount]:
    """The container's mounts of provided volumes, longest path first (pure: no directory is made)."""
    dirs = volume_dirs(pod, root)
    out = []
    for m in container.get("volumeMounts") or []:
        local = dirs.get(str(m.get("name", "")))
        if local is None:
            continue
        sub = str(m.get("subPath") or "") or expand(str(m.get("subPathExpr") or ""), env)
        if sub.startswith("/") or ".." in Path(sub).parts:
            raise ExecError(f"volumeMount {m.get('name')}: subPath {sub!r} must be relative, without '..'")
        out.append(Mount(str(m.get("mountPath", "")).rstrip("/") or "/", local / sub if sub else local))
    return sorted(out, key=lambda mt: -len(mt.path))


def rewrite_paths(text: str, mnts: Sequence[Mount]) -> str:
    """``text`` with a leading mount path (or one after ``=``) replaced by its local directory (pure)."""
    for mt in mnts:
        if mt.path == "/":
            continue
        pattern = re.compile(r"(^|=|:)" + re.escape(mt.path) + r"(?=/|$|:)")
        local = str(mt.local)
        text = pattern.sub(lambda m: m.group(1) + local, text)  # noqa: B023 (used at once, in this pass)
    return text


@dataclass(frozen=True, slots=True)
class ProcessPlan:
    """How to run one pod: argv, environment, working directory, log file, directories to create."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: Path
    log_path: Path
    dirs: tuple[Path, ...]
    grace_s: float


def plan_process(
    pod: Mapping[str, Any],
    root: Path,
    *,
    master_port: int,
    base_env: Mapping[str, str],
    pythonpath: str = "",
) -> ProcessPlan:
    """What ``perfsched emulate --exec`` runs for ``pod`` (pure; see the module docstring)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    ns, name = str(meta.get("namespace", "default")), str(meta.get("name", ""))
    containers = spec.get("containers") or []
    if not containers:
        raise ExecError("the pod has no containers")
    c = containers[0]
    command = [str(x) for x in (c.get("command") or [])] + [str(x) for x in (c.get("args") or [])]
    if not c.get("command"):
        raise ExecError(
            f"container {c.get('name', '?')} has no command: an image's entrypoint cannot run as a local "
            "process (give the TrainingJob template a command)"
        )
    declared = container_env(pod, c)
    env = dict(base_env)
    env.update(declared)
    # every pod runs on this machine: the gang meets on loopback, on a port of its own
    env["MASTER_ADDR"] = LOCALHOST
    env["MASTER_PORT"] = str(master_port)
    for key, value in (("GLOO_SOCKET_IFNAME", "lo"), ("OMP_NUM_THREADS", "1"), ("PYTHONUNBUFFERED", "1")):
        if key not in declared:
            env[key] = value
    if pythonpath:
        env["PYTHONPATH"] = ":".join(p for p in (declared.get("PYTHONPATH", ""), pythonpath) if p)
    mnts = mounts(pod, c, root, env)
    for key in declared:
        env[key] = rewrite_paths(env[key], mnts)
    env["MASTER_ADDR"], env["MASTER_PORT"] = LOCALHOST, str(master_port)
    argv = tuple(rewrite_paths(expand(a, env), mnts) for a in command)
    pod_dir = root / ns / name
    cwd = pod_dir
    working = str(c.get("workingDir") or "")
    if working:
        mapped = rewrite_paths(working, mnts)
        if mapped != working:
            cwd = Path(mapped)
    grace = spec.get("terminationGracePeriodSeconds")
    return ProcessPlan(
        argv=argv,
        env=env,
        cwd=cwd,
        log_path=pod_dir / "log",
        dirs=(pod_dir, *(m.local for m in mnts)),
        grace_s=float(grace) if isinstance(grace, int | float) else DEFAULT_GRACE_S,
    )


# --- the worker's Python path ---------------------------------------------------------------------------

_PROBE = """
import json, sys, sysconfig
from pathlib import Path
for m in sys.argv[1:]:
    __import__(m)
from scheduler.settings import Settings
Settings()
paths = sysconfig.get_paths()
std = {Path(paths[k]).resolve() for k in ("stdlib", "platstdlib")}
site = {Path(paths[k]).resolve() for k in ("purelib", "platlib")}
out = {}
for name, mod in list(sys.modules.items()):
    if "." in name or mod is None:
        continue
    f = getattr(mod, "__file__", None)
    path = Path(f).parent if f and Path(f).name.startswith("__init__.") else (Path(f) if f else None)
    if path is None:
        paths = list(getattr(mod, "__path__", []) or [])
        path = Path(paths[0]) if paths else None
    if path is None:
        continue
    above = set(path.resolve().parents)
    if above & std and not above & site:
        continue
    out[name] = str(path.resolve())
print(json.dumps(out))
"""


def worker_site(site_dir: Path, python: str = sys.executable) -> Path:
    """Fill ``site_dir`` with links to the packages ``ProgressReporter`` imports; returns ``site_dir``.

    The list comes from importing the reporter's modules in ``python`` (this emulator's interpreter by
    default) and keeping the top-level modules that are not the standard library: exactly what a worker
    needs to import ``scheduler.worker``, nothing it brings itself (numpy and PyTorch are never linked).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFSCHED_")}
    repo = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = ":".join(p for p in (str(repo), env.get("PYTHONPATH", "")) if p)
    try:
        out = subprocess.run(
            [python, "-c", _PROBE, *REPORTER_MODULES], capture_output=True, text=True, env=env, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ExecError(f"cannot list the progress reporter's packages with {python}: {exc}") from exc
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["?"])[-1]
        raise ExecError(f"cannot list the progress reporter's packages with {python}: {tail}")
    modules: dict[str, str] = json.loads(out.stdout)
    site_dir.mkdir(parents=True, exist_ok=True)
    for old in site_dir.iterdir():
        if old.is_symlink():
            old.unlink()
    linked = 0
    for name, target in sorted(modules.items()):
        if name in NEVER_LINKED or name.startswith(("__editable__", "_distutils_hack")):
            continue  # the worker's own builds, and import hooks of this venv's .pth files
        (site_dir / Path(target).name).symlink_to(target)
        linked += 1
    log.info("worker site %s: %d packages linked", site_dir, linked, extra={"site": str(site_dir)})
    return site_dir


@lru_cache(maxsize=4)
def find_torch_python(candidates: tuple[str, ...] = ()) -> str | None:
    """A Python that can ``import torch``: ``$PERFSCHED_TRAINER_PYTHON``, this one, Debian's; else None."""
    env_choice = os.environ.get("PERFSCHED_TRAINER_PYTHON", "")
    order = candidates or tuple(p for p in (env_choice, sys.executable, "/usr/bin/python3") if p)
    for python in order:
        try:
            ok = subprocess.run(
                [python, "-c", "import torch, torch.distributed"], capture_output=True, timeout=120
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if ok.returncode == 0:
            return python
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOCALHOST, 0))
        return int(s.getsockname()[1])


# --- the emulator --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExecConfig:
    """``root``: the exec directory (per-pod working directories, volumes, logs). ``tick_s``: wall
    seconds between steps. ``namespace``: only this namespace ("" all). ``kubeconfig``: given to the
    workers as ``KUBECONFIG``. ``pythonpath``: the worker site (``worker_site``), "" for none."""

    root: Path
    tick_s: float = 0.5
    namespace: str = ""
    kubeconfig: str = ""
    pythonpath: str = ""

    def __post_init__(self) -> None:
        if self.tick_s <= 0:
            raise ValueError(f"tick_s must be > 0, got {self.tick_s}")


@dataclass
class _Proc:
    uid: str
    namespace: str
    name: str
    container: str
    image: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    grace_s: float
    started: float
    kill_at: float | None = None
    killed: bool = False
    exited_at: float | None = None
    reported: bool = False


@dataclass
class ExecStep:
    """What one step did (pod keys ``namespace/name``): for logs and tests."""

    started: list[str] = field(default_factory=list)
    terminated: list[str] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)
    exited: dict[str, int] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)
    failed_to_start: dict[str, str] = field(default_factory=dict)


def _last_line(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            lines = [ln for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:1024] if lines else ""


def _base_env(kubeconfig: str) -> dict[str, str]:
    # the emulator's own settings, Python path and virtualenv must not leak into the workers: a pod's
    # `python3` is the machine's, not the one running perfsched
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFSCHED_") and k not in drop}
    if sys.prefix != sys.base_prefix:
        venv_bin = str(Path(sys.prefix) / "bin")
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin)
    if kubeconfig:
        env["KUBECONFIG"] = kubeconfig
    return env


class ExecEmulator:
    """Runs the pods of exec nodes as processes; ``step()`` is one pass (see the module docstring)."""

    def __init__(self, api: ExecApi, config: ExecConfig, clock: Callable[[], float] = time.time) -> None:
        self.api = api
        self.config = config
        self.clock = clock
        self._procs: dict[str, _Proc] = {}
        self._ports: dict[tuple[str, str], int] = {}
        self._ready: set[str] = set()

    @property
    def running(self) -> int:
        return sum(1 for p in self._procs.values() if p.popen.poll() is None)

    def run(self, stop: threading.Event) -> None:
        """Step every ``tick_s`` until ``stop`` is set, then terminate every process still running."""
        try:
            while not stop.is_set():
                try:
                    self.step()
                except PerfschedError as exc:
                    log.warning("exec step failed, retrying: %s", exc)
                stop.wait(self.config.tick_s)
        finally:
            self.shutdown()

    def step(self) -> ExecStep:
        now = self.clock()
        out = ExecStep()
        nodes = set(self.api.exec_nodes())
        for node in sorted(nodes - self._ready):
            self.api.mark_node_ready(node, crd.rfc3339(now))
            self._ready.add(node)
        seen: set[str] = set()
        for pod in self.api.job_pods(self.config.namespace):
            meta = pod.get("metadata") or {}
            if (pod.get("spec") or {}).get("nodeName") not in nodes:
                continue
            uid = str(meta.get("uid", ""))
            seen.add(uid)
            proc = self._procs.get(uid)
            if proc is None:
                self._maybe_start(pod, now, out)
            else:
                self._tend(proc, pod, now, out)
        for uid in [u for u in self._procs if u not in seen]:
            self._tend(self._procs[uid], None, now, out)
        return out

    def _maybe_start(self, pod: Mapping[str, Any], now: float, out: ExecStep) -> None:
        meta = pod.get("metadata") or {}
        ns, name, uid = str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", ""))
        phase = str((pod.get("status") or {}).get("phase") or "Pending")
        if meta.get("deletionTimestamp"):
            # never started here (or started by an emulator that is gone): nothing to wait for
            self.api.finish_deletion(ns, name, uid)
            out.removed.append(f"{ns}/{name}")
            return
        if phase in ("Succeeded", "Failed"):
            return
        if phase == "Running":
            self.api.set_pod_status(
                ns, name, self._terminal_status(pod, 137, "ExecLost",
                "the exec emulator that ran this pod's process stopped; the process is gone", now),
            )  # fmt: skip
            return
        labels = meta.get("labels") or {}
        gang = (f"{ns}/{labels.get(LABEL_JOB_NAME, name)}", str(labels.get(LABEL_GENERATION, "")))
        port = self._ports.setdefault(gang, free_port())
        try:
            plan = plan_process(
                pod,
                self.config.root,
                master_port=port,
                base_env=_base_env(self.config.kubeconfig),
                pythonpath=self.config.pythonpath,
            )
            for d in plan.dirs:
                d.mkdir(parents=True, exist_ok=True)
            with open(plan.log_path, "ab") as logf:
                popen = subprocess.Popen(
                    list(plan.argv),
                    env=dict(plan.env),
                    cwd=plan.cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: signals reach torchrun's children
                )
        except (ExecError, OSError) as exc:
            message = f"perfsched emulate --exec cannot run this pod: {exc}"
            log.warning(message, extra={"pod": f"{ns}/{name}"})
            self.api.set_pod_status(ns, name, self._terminal_status(pod, 127, "ExecError", message, now))
            out.failed_to_start[f"{ns}/{name}"] = str(exc)
            return
        containers = (pod.get("spec") or {}).get("containers") or [{}]
        proc = _Proc(
            uid=uid,
            namespace=ns,
            name=name,
            container=str(containers[0].get("name", "worker")),
            image=str(containers[0].get("image", "")),
            popen=popen,
            log_path=plan.log_path,
            grace_s=plan.grace_s,
            started=now,
        )
        self._procs[uid] = proc
        self.api.set_pod_status(ns, name, self._running_status(proc))
        log.info(
            "started %s/%s as pid %d: %s", ns, name, popen.pid, " ".join(plan.argv),
            extra={"pod": f"{ns}/{name}", "pid": popen.pid, "log": str(plan.log_path)},
        )  # fmt: skip
        out.started.append(f"{ns}/{name}")

    @staticmethod
    def _running_status(proc: _Proc) -> dict[str, Any]:
        ts = crd.rfc3339(proc.started)
        return {
            "phase": "Running",
            "startTime": ts,
            "podIP": LOCALHOST,
            "hostIP": LOCALHOST,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ts}],
            "containerStatuses": [
                {
                    "name": proc.container,
                    "image": proc.image,
                    "imageID": "",
                    "containerID": f"exec://{proc.popen.pid}",
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": ts}},
                }
            ],
        }

    def _signal(self, proc: _Proc, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.popen.pid, sig)

    def _tend(self, proc: _Proc, pod: Mapping[str, Any] | None, now: float, out: ExecStep) -> None:
        key = f"{proc.namespace}/{proc.name}"
        rc = proc.popen.poll()
        meta = (pod or {}).get("metadata") or {}
        deleting = pod is None or bool(meta.get("deletionTimestamp"))
        if deleting and rc is None and proc.kill_at is None:
            grace = meta.get("deletionGracePeriodSeconds")
            grace_s = float(grace) if isinstance(grace, int | float) else proc.grace_s
            self._signal(proc, signal.SIGTERM)
            proc.kill_at = now + grace_s
            out.terminated.append(key)
            log.info("SIGTERM to %s (grace %g s)", key, grace_s, extra={"pod": key})
        if rc is None and proc.kill_at is not None and now >= proc.kill_at and not proc.killed:
            self._signal(proc, signal.SIGKILL)
            proc.killed = True
            out.killed.append(key)
            log.warning("grace period over: SIGKILL to %s", key, extra={"pod": key})
            rc = proc.popen.wait(timeout=10)
        if rc is None:
            if pod is not None and not deleting and (pod.get("status") or {}).get("phase") == "Pending":
                self.api.set_pod_status(proc.namespace, proc.name, self._running_status(proc))  # retry
            return
        if proc.exited_at is None:
            proc.exited_at = now
            out.exited[key] = rc
            log.info("%s exited with code %d", key, rc, extra={"pod": key, "exit_code": rc})
        if pod is not None and not proc.reported:
            reason = "Completed" if rc == 0 else ("Killed" if proc.killed else "Error")
            msg = "" if rc == 0 else _last_line(proc.log_path)
            self.api.set_pod_status(
                proc.namespace, proc.name, self._terminal_status(pod, rc, reason, msg, now)
            )
            proc.reported = True
        if pod is None:
            del self._procs[proc.uid]
        elif deleting and now - proc.exited_at >= LINGER_S:
            self.api.finish_deletion(proc.namespace, proc.name, proc.uid)
            out.removed.append(key)
            del self._procs[proc.uid]
        elif not deleting and str((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed"):
            del self._procs[proc.uid]  # the API has the final status; nothing left to do here

    def _terminal_status(
        self, pod: Mapping[str, Any], rc: int, reason: str, message: str, now: float
    ) -> dict[str, Any]:
        containers = (pod.get("spec") or {}).get("containers") or [{}]
        c = containers[0]
        proc = self._procs.get(str((pod.get("metadata") or {}).get("uid", "")))
        ts = crd.rfc3339(now)
        term: dict[str, Any] = {
            "exitCode": int(rc if rc >= 0 else 128 - rc),
            "reason": reason,
            "finishedAt": ts,
            "startedAt": crd.rfc3339(proc.started) if proc is not None else ts,
        }
        if message:
            term["message"] = message
        status: dict[str, Any] = {
            "phase": "Succeeded" if rc == 0 else "Failed",
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": ts}],
            "containerStatuses": [
                {
                    "name": str(c.get("name", "worker")),
                    "image": str(c.get("image", "")),
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "started": False,
                    "state": {"terminated": term},
                }
            ],
        }
        if reason in ("ExecError", "ExecLost"):
            status["reason"], status["message"] = reason, message
        return status

    def shutdown(self, wait_s: float = 5.0) -> None:
        """SIGTERM every process still running, SIGKILL what is left after ``wait_s``."""
        live = [p for p in self._procs.values() if p.popen.poll() is None]
        for p in live:
            self._signal(p, signal.SIGTERM)
        deadline = time.monotonic() + wait_s
        for p in live:
            try:
                p.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._signal(p, signal.SIGKILL)
                p.popen.wait()
        if live:
            log.info("stopped %d worker processes", len(live))
