"""End-to-end scheduling throughput: the real kube-scheduler with the perfsched extender vs without it.

Same run, same machine, same client limits: for each node count, a dev cluster (real etcd,
kube-apiserver, KWOK nodes of 8 GPUs) gets its one-GPU pods and its gangs (TrainingJob-labelled pods,
8 x 1-GPU replicas each) created *before* the scheduler starts; then one real kube-scheduler schedules
them all, once with the ``default-scheduler`` profile (no extender) and once with the ``perfsched``
profile calling ``perfsched extender`` for filter and prioritize (and bind with ``--extender-binds``).
Both schedulers get the same raised client QPS/burst (default 1000/2000), so neither is capped by its
API client.

Bind times are taken by a watch in this process (local monotonic clock, not the 1 s resolution of
``PodScheduled``): pods/s = (pods - 1) / (last bind - first bind); per gang, the seconds from its first
replica's bind to its last. ``--profile DIR`` runs the extender under cProfile (its event loop's
thread, where it spends its CPU; ``DIR/extender-<nodes>.prof``, read with ``python -m pstats``).
``--pprof DIR`` takes a CPU profile of kube-scheduler itself (Go's pprof, its ``/debug/pprof/profile``
endpoint) over the first ``--pprof-seconds`` of scheduling in every run, bare and with the extender
(``DIR/kube-scheduler-<bare|extender>-<nodes>.pprof``, read with ``go tool pprof -top -cum FILE``): what
kube-scheduler spends on the extender's HTTP calls (``HTTPExtender.send``) beside its own plugins.

Run: ``python bench/extender_e2e.py [--nodes 500,5000] [--pods 2000] [--gangs 10] [--repeat 3] [--qps 1000]
[--burst 2000] [--json]``; prints both runs and their ratio, and writes ``bench/results/extender_e2e.json``.

The VM this runs on is shared, so one pair's ratio moves a lot: ``--repeat N`` runs N (bare, extender)
pairs per node count, rotating which goes first, and prints each pair's ratio (only
ratios within a pair, never across pairs), their median, and the median CPU ms per pod of each component
(kube-scheduler, extender, kube-apiserver, etcd, kwok; user + system time from ``/proc/<pid>/stat``
between the scheduler's start and the last bind). ``--before TREE`` adds a third run to each pair: the
extender of that source tree (e.g. a ``git archive`` of the last commit), against the same bare run;
``--before A,B`` one run per tree. ``--floors`` adds two more: ``bench/extender_floor.py``, an extender
that speaks the same protocol over the same server but decides nothing (every node passes, one score),
and the same with the extender's watch-fed cache: what any extender costs kube-scheduler, and what the
watches add (``--floors floor``: the first only); each pair then also prints the extender's pods/s
against each floor's. ``--gpu-api dra`` publishes the nodes' GPUs as DRA devices (ResourceSlices of a
DeviceClass backing ``nvidia.com/gpu``: kube-scheduler's DynamicResources plugin then creates and
allocates a ResourceClaim per pod) instead of device-plugin ``allocatable``.
``--api-counts`` prints, per pod, the API server's requests by verb and resource and the watch events
(and kB) it sent by resource while the scheduler ran (its ``/metrics``). ``--py-spy EXE`` makes
``--profile`` sample the extender with py-spy (started as the extender's parent, which works where
attaching to a running process is not allowed; all threads, wall time while runnable;
``DIR/extender-<nodes>.pyspy.txt``, collapsed stacks).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from kube_scheduler_baseline import NAMESPACE, bench_nodes, pod_body, start_extender  # noqa: E402
from kubernetes import client as k8s  # noqa: E402
from kubernetes import watch  # noqa: E402

from e2e.harness import resnet_job  # noqa: E402
from perfsched_dev.devcluster.cluster import DevCluster, UpOptions  # noqa: E402
from perfsched_dev.devcluster.configs import SchedulerTuning  # noqa: E402
from perfsched_dev.devcluster.process import ProcessRecord, is_running  # noqa: E402
from perfsched_dev.k8s import bootstrap  # noqa: E402
from scheduler.k8s import connect  # noqa: E402

GANG_SIZE = 8
#: ``--py-spy EXE``: the py-spy that samples the extender for ``--profile`` instead of cProfile
_PY_SPY: list[str] = []


@dataclass
class Run:
    scheduler: str
    nodes: int
    pods: int
    gangs: int
    pods_per_s: float
    first_to_last_bind_s: float
    wall_s: float
    gang_span_s: list[float] = field(default_factory=list)
    #: CPU ms per pod of each component while the scheduler ran
    cpu_ms_per_pod: dict[str, float] = field(default_factory=dict)
    #: per verb: [calls, mean ms per call as the extender measured it]
    extender_calls: dict[str, list[float]] = field(default_factory=dict)
    #: the extender's CPU ms per pod split by thread: "loop" (the event loop: HTTP and decisions; of it
    #: "loop-sys" in the kernel: sockets) and "other" (the cache's watch threads, bind workers, the
    #: placement task's API calls)
    extender_threads_ms_per_pod: dict[str, float] = field(default_factory=dict)
    #: with ``--api-counts``: the API server's requests ("verb resource") and watch events sent ("watch
    #: kind") while the scheduler ran, per pod
    api_per_pod: dict[str, float] = field(default_factory=dict)

    @property
    def gang_median_s(self) -> float:
        return round(statistics.median(self.gang_span_s), 3) if self.gang_span_s else 0.0


def _pod(name: str, scheduler_name: str, gang: str = "", replica: int = 0) -> dict[str, Any]:
    if not gang:
        return pod_body(name, scheduler_name)
    labels = {"perfsched.dev/job-name": gang, "perfsched.dev/generation": "1"}
    labels["perfsched.dev/replica-index"] = str(replica)
    return pod_body(name, scheduler_name, labels, {"perfsched.dev/world-size": str(GANG_SIZE)})


class BindWatch:
    """Watches the namespace's pods and notes, on this process's clock, when each is first bound."""

    def __init__(self, api: Any) -> None:
        self.bound: dict[str, float] = {}
        self._core = k8s.CoreV1Api(api)
        self._stop = threading.Event()
        self._rv = self._core.list_namespaced_pod(NAMESPACE, limit=1).metadata.resource_version
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        w = watch.Watch()
        while not self._stop.is_set():
            stream = w.stream(
                self._core.list_namespaced_pod, NAMESPACE, resource_version=self._rv, timeout_seconds=30
            )
            for event in stream:
                pod = event["object"]
                self._rv = pod.metadata.resource_version
                if pod.spec.node_name and pod.metadata.name not in self.bound:
                    self.bound[pod.metadata.name] = time.monotonic()
                if self._stop.is_set():
                    break

    def stop(self) -> None:
        self._stop.set()


def run(
    nodes: int,
    pods: int,
    gangs: int,
    with_extender: bool,
    tuning: SchedulerTuning,
    profile: str,
    logs: str = "",
    tree: str = "",
    pprof: tuple[str, float] = ("", 0.0),
    api_counts: bool = False,
    floor: str = "",
    gpu_api: str = "device-plugin",
) -> Run:
    """One cluster, one scheduler: create everything, start the scheduler, wait until all are bound."""
    scheduler_name = "perfsched" if with_extender else "default-scheduler"
    with tempfile.TemporaryDirectory(prefix="perfsched-e2e-bench-") as tmp:
        dc = DevCluster(Path(tmp) / "dc")
        state = dc.up(UpOptions(nodes=bench_nodes(nodes), schedulers=(), timeout_s=300, gpu_api=gpu_api))
        extender: ProcessRecord | None = None
        try:
            api = connect.api_client(state.kubeconfig)
            core = k8s.CoreV1Api(api)
            bootstrap.create_namespace(api, NAMESPACE)
            custom = k8s.CustomObjectsApi(api)
            bodies = [_pod(f"p-{i}", scheduler_name) for i in range(pods)]
            for g in range(gangs):
                custom.create_namespaced_custom_object(
                    "perfsched.dev",
                    "v1alpha1",
                    NAMESPACE,
                    "trainingjobs",
                    resnet_job(f"gang-{g}", GANG_SIZE, 1),
                )
                bodies += [_pod(f"gang-{g}-w{r}", scheduler_name, f"gang-{g}", r) for r in range(GANG_SIZE)]
            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(lambda body: core.create_namespaced_pod(NAMESPACE, body), bodies))
            if with_extender:
                extender = _start_extender(dc, state, Path(tmp), profile, nodes, tree, floor)
            binds = BindWatch(api)
            cpu0 = _cpu_seconds(dc)
            threads0 = _thread_cpu_seconds(extender)
            api0 = _api_counts(dc) if api_counts else {}
            t0 = time.monotonic()
            dc.start_scheduler("perfsched" if with_extender else "default", tuning)
            grab = _kube_scheduler_profile(dc, with_extender, nodes, *pprof) if pprof[0] else None
            total = len(bodies)
            while len(binds.bound) < total:
                if time.monotonic() - t0 > 900:
                    raise RuntimeError(f"{total - len(binds.bound)} pods still unbound after 900 s")
                time.sleep(0.2)
            wall = time.monotonic() - t0
            cpu1 = _cpu_seconds(dc)
            threads1 = _thread_cpu_seconds(extender)
            api1 = _api_counts(dc) if api_counts else {}
            binds.stop()
            calls = _extender_calls(state.ports["extender"]) if with_extender else {}
            if grab is not None:
                grab.join(timeout=pprof[1] + 60)
            api.close()
        finally:
            if extender is not None and profile:  # SIGINT: uvicorn exits and the profiler writes its file
                os.kill(_extender_pid(extender), signal.SIGINT)
                deadline = time.monotonic() + 120
                while is_running(extender) and time.monotonic() < deadline:
                    time.sleep(0.2)
            dc.down()
            if logs:
                shutil.copytree(
                    Path(tmp) / "dc" / "logs", Path(logs) / f"{scheduler_name}-{nodes}", dirs_exist_ok=True
                )
    times = sorted(binds.bound.values())
    span = max(times[-1] - times[0], 1e-3)
    gang_spans = []
    for g in range(gangs):
        at = [binds.bound[f"gang-{g}-w{r}"] for r in range(GANG_SIZE)]
        gang_spans.append(round(max(at) - min(at), 3))
    result = Run(
        scheduler_name, nodes, total, gangs, round((total - 1) / span, 1), round(span, 2), round(wall, 2)
    )
    result.gang_span_s = gang_spans
    result.extender_calls = calls
    result.cpu_ms_per_pod = {k: round(1000 * (v - cpu0.get(k, 0.0)) / total, 3) for k, v in cpu1.items()}
    result.extender_threads_ms_per_pod = {
        k: round(1000 * (v - threads0.get(k, 0.0)) / total, 3) for k, v in threads1.items()
    }
    per_pod = {k: round((v - api0.get(k, 0.0)) / total, 2) for k, v in sorted(api1.items())}
    result.api_per_pod = {k: v for k, v in per_pod.items() if v > 0}  # what rounds to 0 is left out
    return result


def _api_counts(dc: DevCluster) -> dict[str, float]:
    """The API server's request counts by "verb resource" and watch events sent by "watch kind" so far
    and their kB ("watch-kB kind") so far (its ``apiserver_request_total``, ``apiserver_watch_events_total``
    and ``apiserver_watch_events_sizes``), from its ``/metrics``."""
    import httpx

    state = dc.load()
    assert state is not None
    headers = {"Authorization": f"Bearer {dc.admin_token()}"}
    url = f"{state.endpoints['apiserver']}/metrics"
    text = httpx.get(url, headers=headers, verify=False, timeout=30).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("apiserver_request_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            key = f"{labels.get('verb', '')} {labels.get('resource', '')}"
            if labels.get("subresource"):
                key += "/" + labels["subresource"]
        elif line.startswith("apiserver_watch_events_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            key = f"watch-event {labels.get('resource') or labels.get('kind', '')}"
        elif line.startswith("apiserver_watch_events_sizes_sum{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            key = f"watch-kB {labels.get('resource') or labels.get('kind', '')}"
            out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1]) / 1000
            continue
        else:
            continue
        out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def _cpu_seconds(dc: DevCluster) -> dict[str, float]:
    """CPU seconds (user + system) each of the cluster's processes has used so far, by component."""
    state = dc.load()
    out: dict[str, float] = {}
    for name, pid in (state.pids if state is not None else {}).items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[
            name.removeprefix("kube-scheduler-")
            .replace("perfsched", "kube-scheduler")
            .replace("default", "kube-scheduler")
        ] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def _thread_cpu_seconds(extender: ProcessRecord | None) -> dict[str, float]:
    """The extender's CPU seconds so far: its main thread (uvicorn's event loop) and all other threads
    (threads that ended are not counted: the cache's watch threads live as long as the process)."""
    if extender is None:
        return {}
    out = {"loop": 0.0, "loop-sys": 0.0, "other": 0.0}
    tick = os.sysconf("SC_CLK_TCK")
    pid = _extender_pid(extender)
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        side = "loop" if task.name == str(pid) else "other"
        out[side] += (int(fields[11]) + int(fields[12])) / tick
        if side == "loop":
            out["loop-sys"] += int(fields[12]) / tick
    return out


def _extender_pid(extender: ProcessRecord) -> int:
    """The extender's own process: the record's, or under ``--py-spy`` the sampler's child."""
    if not _PY_SPY:
        return extender.pid
    children = Path(f"/proc/{extender.pid}/task/{extender.pid}/children").read_text().split()
    return int(children[0]) if children else extender.pid


def _kube_scheduler_profile(
    dc: DevCluster, with_extender: bool, nodes: int, directory: str, seconds: float
) -> threading.Thread:
    """Fetch a ``seconds`` CPU profile from the running kube-scheduler's pprof endpoint (admin token;
    kube-scheduler asks the API server whether the caller may) into ``directory``, in a thread."""
    import httpx

    state = dc.load()
    assert state is not None
    name = "kube-scheduler-" + ("perfsched" if with_extender else "default")
    url = f"{state.endpoints[name]}/debug/pprof/profile?seconds={max(1, round(seconds))}"
    out = Path(directory) / f"kube-scheduler-{'extender' if with_extender else 'bare'}-{nodes}.pprof"
    out.parent.mkdir(parents=True, exist_ok=True)
    headers = {"Authorization": f"Bearer {dc.admin_token()}"}

    def fetch() -> None:
        try:
            # kube-scheduler serves a self-signed certificate of its own (--cert-dir), not the cluster CA's
            reply = httpx.get(url, headers=headers, verify=False, timeout=seconds + 60)
            reply.raise_for_status()
            out.write_bytes(reply.content)
        except httpx.HTTPError as exc:
            print(f"  kube-scheduler profile not taken: {exc}", file=sys.stderr)

    thread = threading.Thread(target=fetch, name="pprof", daemon=True)
    thread.start()
    return thread


def _extender_calls(port: int) -> dict[str, list[float]]:
    """Per verb: [calls, mean ms per call] from the extender's own metrics; and per result of its gang-plan
    checks (``plan-check <result>``): [checks, 0]."""
    import httpx

    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    sums: dict[str, dict[str, float]] = {}
    checks: dict[str, list[float]] = {}
    for line in text.splitlines():
        if line.startswith('perfsched_extender_plan_checks_total{result="'):
            checks[f"plan-check {line.split(chr(34))[1]}"] = [float(line.rsplit(" ", 1)[1]), 0.0]
        for part in ("_count", "_sum"):
            head = f"perfsched_extender_request_duration_seconds{part}{{verb="
            if line.startswith(head):
                verb = line[len(head) + 1 : line.index('"', len(head) + 1)]
                sums.setdefault(verb, {})[part] = float(line.rsplit(" ", 1)[1])
    return {
        **{
            v: [s.get("_count", 0), round(1000 * s.get("_sum", 0) / max(1, s.get("_count", 0)), 3)]
            for v, s in sums.items()
        },
        **checks,
    }


def _start_extender(
    dc: DevCluster, state: Any, tmp: Path, profile: str, nodes: int, tree: str = "", floor: str = ""
) -> ProcessRecord:
    """Start ``perfsched extender`` (from source tree ``tree`` if given; ``floor`` "floor" or "watch":
    ``bench/extender_floor.py`` instead, with ``--watch`` for "watch") and wait until it is ready."""
    if floor:
        argv = [sys.executable, str(HERE / "extender_floor.py"), "--port", str(state.ports["extender"])]
        argv += ["--kubeconfig", state.kubeconfig, *(["--watch"] if floor == "watch" else [])]
        return start_extender(dc, state, argv, tmp / "dc" / "logs" / "extender.log")
    argv = [sys.executable]
    if profile and _PY_SPY:  # sampled from outside, every thread, in py-spy's "raw" (collapsed) format
        Path(profile).mkdir(parents=True, exist_ok=True)
        out = str(Path(profile).resolve() / f"extender-{nodes}.pyspy.txt")
        argv = [*_PY_SPY, "record", "--nonblocking", "--threads", "--rate", "250", "--format", "raw"]
        argv += ["-o", out, "--", sys.executable]
    elif profile:  # the event loop's thread, where the extender spends its CPU; written when it exits
        Path(profile).mkdir(parents=True, exist_ok=True)
        argv += ["-m", "cProfile", "-o", str(Path(profile).resolve() / f"extender-{nodes}.prof")]
    argv += ["-m", "scheduler.cli", "extender", "--host", "127.0.0.1", "--port", str(state.ports["extender"])]
    argv += ["--kubeconfig", state.kubeconfig]
    return start_extender(dc, state, argv, tmp / "dc" / "logs" / "extender.log", tree)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--nodes", default="500,5000", help="comma-separated node counts")
    ap.add_argument("--pods", default="2000", help="one-GPU pods, one count or one per node count")
    ap.add_argument("--gangs", type=int, default=10, help="gangs of 8 x 1-GPU replicas")
    ap.add_argument("--qps", type=float, default=1000.0, help="client QPS of both kube-schedulers")
    ap.add_argument("--burst", type=int, default=2000, help="client burst of both kube-schedulers")
    ap.add_argument("--profile", default="", help="directory for cProfile profiles of the extender")
    ap.add_argument(
        "--py-spy",
        default="",
        help="py-spy executable: --profile samples the extender with it (collapsed stacks, all threads; "
        "the extender's CPU figures then include py-spy's)",
    )
    ap.add_argument("--pprof", default="", help="directory for CPU profiles of kube-scheduler (Go pprof)")
    ap.add_argument("--pprof-seconds", type=float, default=5.0, help="length of each kube-scheduler profile")
    ap.add_argument("--logs", default="", help="directory to keep the clusters' logs in")
    ap.add_argument(
        "--before",
        default="",
        help="also run these trees' extenders (comma-separated) in each pair (before/after)",
    )
    ap.add_argument(
        "--floors",
        nargs="?",
        const="floor,watch",
        default="",
        help="add runs to each pair: bench/extender_floor.py (the protocol with no decisions: 'floor'), and "
        "the same with the extender's watch-fed cache ('watch'); both without a value",
    )
    ap.add_argument(
        "--gpu-api",
        choices=("device-plugin", "dra"),
        default="device-plugin",
        help="how the KWOK nodes publish their GPUs (dra: ResourceSlices, one ResourceClaim per pod)",
    )
    ap.add_argument(
        "--before-binds",
        action="store_true",
        help="the --before tree's extender binds (trees from before kube-scheduler could bind alone)",
    )
    ap.add_argument(
        "--extender-binds",
        action="store_true",
        help="register the extender's bind verb (default: kube-scheduler binds, as the chart does)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="pairs (bare, extender) per node count, rotating which goes first",
    )
    ap.add_argument(
        "--api-counts",
        action="store_true",
        help="print the API server's requests and watch events per pod by resource in each run",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.py_spy:
        _PY_SPY.append(args.py_spy)
    tuning = SchedulerTuning(qps=args.qps, burst=args.burst, extender_binds=args.extender_binds)
    node_counts = [int(n) for n in args.nodes.split(",")]
    pod_counts = [int(p) for p in args.pods.split(",")]
    pod_counts += [pod_counts[-1]] * (len(node_counts) - len(pod_counts))
    load = [os.getloadavg()[0]]
    rows = []
    pprof = (args.pprof, args.pprof_seconds)
    counts = args.api_counts
    gpu_api = args.gpu_api
    for nodes, pods in zip(node_counts, pod_counts, strict=False):
        pairs = []
        before = replace(tuning, extender_binds=tuning.extender_binds or args.before_binds)
        before_trees = [t for t in args.before.split(",") if t]
        before_sides = ["before", *(f"before{i + 1}" for i in range(1, len(before_trees)))][
            : len(before_trees)
        ]
        floors = [f for f in args.floors.split(",") if f]
        if any(f not in ("floor", "watch") for f in floors):
            ap.error(f"--floors: expected floor and/or watch, got {args.floors!r}")
        floor_sides = [{"floor": "floor", "watch": "floor+watch"}[f] for f in floors]
        # what each extra run is, as printed
        extra = dict(zip(before_sides, before_trees, strict=False))
        floor_commands = {"floor": "bench/extender_floor.py", "watch": "bench/extender_floor.py --watch"}
        extra.update(zip(floor_sides, (floor_commands[f] for f in floors), strict=True))
        for rep in range(args.repeat):
            runs = {
                "bare": partial(
                    run,
                    nodes,
                    pods,
                    args.gangs,
                    False,
                    tuning,
                    "",
                    args.logs,
                    pprof=pprof,
                    api_counts=counts,
                    gpu_api=gpu_api,
                ),
                "extender": partial(
                    run,
                    nodes,
                    pods,
                    args.gangs,
                    True,
                    tuning,
                    args.profile,
                    args.logs,
                    pprof=pprof,
                    api_counts=counts,
                    gpu_api=gpu_api,
                ),
            }
            for side, tree in zip(before_sides, before_trees, strict=True):
                runs[side] = partial(
                    run, nodes, pods, args.gangs, True, before, "", args.logs, tree, gpu_api=gpu_api
                )
            for side, floor in zip(floor_sides, floors, strict=True):
                runs[side] = partial(
                    run, nodes, pods, args.gangs, True, tuning, "", args.logs, floor=floor, gpu_api=gpu_api
                )
            # rotate which goes first, so a load drift during the pair favours none of them
            order = list(runs)[rep % len(runs) :] + list(runs)[: rep % len(runs)]
            done = {name: runs[name]() for name in order}
            bare, ext = done["bare"], done["extender"]
            pair: dict[str, Any] = {
                "bare": asdict(bare),
                "extender": asdict(ext),
                "ratio": round(ext.pods_per_s / bare.pods_per_s, 3),
                "gang_median_s": {"bare": bare.gang_median_s, "extender": ext.gang_median_s},
            }
            print(f"[{nodes} nodes, pair {rep + 1} of {args.repeat}, run order {', '.join(order)}]")
            _print(bare, ext, tuning)
            for side, tree in extra.items():
                old = done[side]
                pair[side] = asdict(old)
                pair[f"{side}_ratio"] = round(old.pods_per_s / bare.pods_per_s, 3)
                print(f"  extender from {tree}: {old.pods_per_s:.1f} pods/s", end=", ")
                cpu = old.cpu_ms_per_pod.get("extender", 0)
                print(
                    f"ratio {pair[f'{side}_ratio']:.2f}; CPU {cpu:.2f} ms per pod; calls {old.extender_calls}"
                )
            for side in floor_sides:
                pair[f"extender_vs_{side}"] = round(ext.pods_per_s / done[side].pods_per_s, 3)
                vs = pair[f"extender_vs_{side}"]
                print(f"  perfsched extender / {extra[side]}: {vs:.2f} (target >= 0.90)")
            pairs.append(pair)
        rows.append(_summary(nodes, pods, pairs, extra))
    load.append(os.getloadavg()[0])
    record = {"qps": args.qps, "burst": args.burst, "extender_binds": args.extender_binds, "runs": rows}
    record["gpu_api"] = gpu_api
    record["load_avg_1m"] = [round(x, 2) for x in load]
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "extender_e2e.json").write_text(json.dumps(record, indent=2))
    print(f"1-min load average {load[0]:.1f} -> {load[1]:.1f} ({os.cpu_count()} CPUs)")
    if args.json:
        print(json.dumps(record, indent=2))


def _summary(
    nodes: int, pods: int, pairs: list[dict[str, Any]], trees: dict[str, str] | None = None
) -> dict[str, Any]:
    """The pairs of one node count with their median ratio and median CPU ms per pod by component
    (``trees``: what each extra run was by side: "before", "before2", ... for the ``--before`` trees,
    "floor" and "floor+watch" for ``--floors``)."""
    trees = trees or {}
    ratios = [p["ratio"] for p in pairs]
    cpu: dict[str, dict[str, float]] = {}
    for side in ("bare", "extender", *trees):
        if not all(side in p for p in pairs):
            continue
        comps = sorted({c for p in pairs for c in p[side]["cpu_ms_per_pod"]})
        cpu[side] = {
            c: round(statistics.median(p[side]["cpu_ms_per_pod"].get(c, 0.0) for p in pairs), 3)
            for c in comps
        }
    summary = {"nodes": nodes, "pods": pods, "ratios": ratios, "median_ratio": statistics.median(ratios)}
    summary["median_cpu_ms_per_pod"] = cpu
    for side, tree in trees.items():
        if all(f"extender_vs_{side}" in p for p in pairs):
            vs = [p[f"extender_vs_{side}"] for p in pairs]
            summary[f"median_extender_vs_{side}"] = statistics.median(vs)
            print(
                f"== {nodes} nodes, perfsched extender / {tree}: {', '.join(f'{r:.2f}' for r in vs)}",
                end="; ",
            )
            print(f"median {summary[f'median_extender_vs_{side}']:.2f} (target >= 0.90)")
        before = [p[f"{side}_ratio"] for p in pairs]
        summary[f"median_{side}_ratio"] = statistics.median(before)
        print(f"== {nodes} nodes, {tree}: ratios {', '.join(f'{r:.2f}' for r in before)}", end="; ")
        print(f"median {summary[f'median_{side}_ratio']:.2f}")
    print(
        f"== {nodes} nodes: ratios with/without extender {', '.join(f'{r:.2f}' for r in ratios)}; "
        f"median {summary['median_ratio']:.2f} (target >= 0.80)"
    )
    labels = [("bare", "without"), ("extender", "with")]
    labels += [(side, f"with {tree}") for side, tree in trees.items()]
    for side, label in labels:
        if side not in cpu:
            continue
        parts = ", ".join(f"{k} {v:.2f}" for k, v in cpu[side].items())
        print(f"   median CPU ms per pod {label} extender: {parts} (total {sum(cpu[side].values()):.2f})")
    return {**summary, "pairs": pairs}


def _print(bare: Run, ext: Run, tuning: SchedulerTuning) -> None:
    print(
        f"{bare.pods} pods ({bare.pods - bare.gangs * GANG_SIZE} one-GPU + {bare.gangs} gangs of "
        f"{GANG_SIZE} x 1 GPU) on {bare.nodes} KWOK nodes, client qps {tuning.qps:g}/burst {tuning.burst}, "
        f"{'extender' if tuning.extender_binds else 'kube-scheduler'} binds:"
    )
    for label, r in (("without extender", bare), ("with perfsched extender", ext)):
        print(
            f"  {label:<24} {r.pods_per_s:>7.1f} pods/s (first to last bind {r.first_to_last_bind_s} s); "
            f"gang first to last bind: median {r.gang_median_s} s, max {max(r.gang_span_s, default=0)} s"
        )
    for label, r in (("without", bare), ("with", ext)):
        cpu = ", ".join(f"{k} {v:.2f}" for k, v in sorted(r.cpu_ms_per_pod.items()))
        print(f"  CPU ms per pod {label} extender: {cpu} (total {sum(r.cpu_ms_per_pod.values()):.2f})")
    calls = ", ".join(
        f"{verb} {int(n)}" if verb.startswith("plan-check") else f"{verb} {int(n)} x {ms:.2f} ms"
        for verb, (n, ms) in sorted(ext.extender_calls.items())
    )
    print(f"  extender calls (count x mean time inside the extender): {calls}")
    threads = ", ".join(f"{k} {v:.2f}" for k, v in ext.extender_threads_ms_per_pod.items())
    print(f"  extender CPU ms per pod by thread: {threads}")
    for label, r in (("without", bare), ("with", ext)):
        if r.api_per_pod:
            parts = ", ".join(f"{k} {v:g}" for k, v in r.api_per_pod.items())
            print(f"  API requests and watch events per pod {label} extender: {parts}")
    print(f"  ratio with/without: {ext.pods_per_s / bare.pods_per_s:.2f} (target >= 0.80)")


if __name__ == "__main__":
    main()
