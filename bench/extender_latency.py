"""Extender latency: p50/p99 of filter and prioritize, in-process and over loopback HTTP.

Per call, with 1,000 and 5,000 node names (nodeCacheCapable: true), for a 2-GPU pod with model
annotations (so prioritize asks the predictor); and, in-process, filter for the first replica of a new
4 x 2-GPU gang on every call (``filter-gang``: no plan yet, so the gang placement runs;
``filter-gang-10%``: offered a new random 10% of the nodes on every call, as kube-scheduler does at
5,000 nodes, so the gang is planned again over those candidates only; ``filter-gang-checked``: as
``filter-gang`` with the plan checked against a read of its nodes' pods, answered from memory, so the row
is the extender's own cost of the check, a worker-thread hop included, without the API server's).

The floor, measured in the same run with the same payloads and the same transport: a minimal
Starlette app whose route parses the body with orjson, serialises it back with orjson and answers it
padded with JSON whitespace to the byte length of the extender's answer for that verb and payload
(like for like: same parse, same reply size; the answers are 2.5x the request, 7x for filter-gang
whose rejected nodes all carry the gang's placement in their reason).

- in-process: the ASGI app called directly (routing, body parse, decision, serialisation), with
  the process pinned to one core; besides the same request every call, two realistic variants:
  ``<verb>-order`` sends the names in a new order on every call (kube-scheduler's parallel filter
  does; ``<verb>-order-mixed``: the same with names of varying lengths, EKS-style
  ``ip-10-0-42.ec2.internal``, where the other rows' names all have one length, as a node pool's
  generated names do); ``<verb>-churn`` changes the extender's
  cache (a GPU reserved, then released) before every call, as binds and watch events do;
- loopback: uvicorn in a child process pinned to one core, served with ``perfsched extender``'s options
  (``scheduler.commands.extender.server_options``), a keep-alive ``http.client`` connection.

Target: over loopback HTTP at 5,000 names, the extender's p99 <= 3x the floor's (every ratio is
printed: of the minimum, the median and the 99th percentile).
Run: ``python bench/extender_latency.py [--calls N] [--oracle table|predictor] [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import itertools
import json
import multiprocessing as mp
import os
import random
import socket
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.core.types import Job, PlacementShape
from scheduler.k8s.cache import ClusterCache, Kind

TYPES = [("A100", "NVIDIA-A100-SXM4-40GB", 8), ("V100", "Tesla-V100-SXM2-16GB", 8), ("T4", "Tesla-T4", 4)]


class SpecOracle:
    """A cheap deterministic oracle (relative FP16 speed x GPUs) for when the real predictor is absent."""

    SPEED: ClassVar[dict[str, float]] = {"A100": 3.0, "V100": 1.0, "T4": 0.4}

    def throughput(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]:
        return [
            self.SPEED.get(s.gpu_type, 0.1) * s.num_gpus / (1 + 0.1 * (s.num_nodes - 1)) for _, s in queries
        ]


def make_oracle(kind: str) -> Any:
    if kind == "predictor":
        from scheduler.oracles.predictor import PredictorOracle

        return PredictorOracle.load()
    return SpecOracle()


def node_name(i: int, mixed: bool = False) -> str:
    """Node ``i``'s name: ``gpu-00042`` (one length, as a node pool's generated names), or with
    ``mixed`` an EKS-style ``ip-10-0-42.ec2.internal`` (lengths vary)."""
    return f"ip-10-{i // 250}-{i % 250}.ec2.internal" if mixed else f"gpu-{i:05d}"


def cluster(n: int, seed: int = 1, mixed: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = random.Random(seed)
    nodes, pods = [], []
    for i in range(n):
        gpu_type, product, gpus = TYPES[i % len(TYPES)]
        name = node_name(i, mixed)
        nodes.append(
            {
                "metadata": {
                    "name": name,
                    "labels": {
                        "nvidia.com/gpu.product": product,
                        "perfsched.dev/rack": f"r{i // 32}",
                        "perfsched.dev/nvlink-domain": f"d{i // 4}" if gpu_type == "A100" else "",
                        "perfsched.dev/interconnect": "nvlink" if gpu_type != "T4" else "pcie",
                    },
                },
                "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}},
            }
        )
        used = rng.randint(0, gpus)
        if used:
            pods.append(
                {
                    "metadata": {"name": f"busy-{i}", "namespace": "load", "uid": f"u{i}"},
                    "spec": {
                        "nodeName": name,
                        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(used)}}}],
                    },
                    "status": {"phase": "Running"},
                }
            )
    return nodes, pods


def payload(n: int, mixed: bool = False) -> bytes:
    pod = {
        "metadata": {
            "name": "bench-pod",
            "namespace": "bench",
            "uid": "bench-uid",
            "annotations": {"perfsched.dev/model": "resnet50", "perfsched.dev/batch-size": "128"},
        },
        "spec": {
            "schedulerName": "perfsched",
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
        },
    }
    return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": [node_name(i, mixed) for i in range(n)]})


def gang_payloads(n: int, count: int, share: float = 1.0) -> list[bytes]:
    """Filter bodies for the first replica of ``count`` different 4 x 2-GPU gangs, none placed yet.

    Each call is a gang the extender has no plan for, so filter runs the gang placement over the
    whole cluster (the whole-cluster index's search over every node of the type). With ``share`` < 1
    each body offers a new random sample of that share of the nodes, as kube-scheduler's
    ``percentageOfNodesToScore`` does (10% at 5,000 nodes): the whole-cluster plan is rarely among
    them, so the gang is planned again over the candidates only.
    """
    out = []
    rng = random.Random(n)
    names = [f"gpu-{j:05d}" for j in range(n)]
    for i in range(count):
        pod = {
            "metadata": {
                "name": f"gang-{i:06d}-w0",
                "namespace": "bench",
                "uid": f"gang-uid-{i:06d}",
                "labels": {
                    "perfsched.dev/job-name": f"gang-{i:06d}",
                    "perfsched.dev/generation": "1",
                    "perfsched.dev/replica-index": "0",
                },
                "annotations": {"perfsched.dev/gpu-type": "A100", "perfsched.dev/world-size": "4"},
            },
            "spec": {
                "schedulerName": "perfsched",
                "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
            },
        }
        offered = names if share >= 1 else sorted(rng.sample(names, max(1, int(n * share))))
        out.append(orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": offered}))
    return out


class MemoryPods:
    """The extender's ``PodReader`` answered from the bench cluster's pods (no I/O)."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.by_node: dict[str, list[dict[str, Any]]] = {}
        for p in pods:
            self.by_node.setdefault(p["spec"]["nodeName"], []).append(p)

    def pods_on(self, node: str, not_older_than: str = "") -> list[dict[str, Any]]:
        return self.by_node.get(node, [])


def build_apps(
    n: int, oracle_kind: str, pads: dict[str, int] | None = None, mixed: bool = False, checked: bool = False
) -> tuple[Any, Any]:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from scheduler.extender import create_app
    from scheduler.settings import Settings

    nodes, pods = cluster(n, mixed=mixed)
    cache = ClusterCache()
    cache.replace(Kind.NODES, nodes, "1")
    cache.replace(Kind.PODS, pods, "1")
    cache.replace(Kind.TRAININGJOBS, [], "1")
    reader = MemoryPods(pods) if checked else None
    app = create_app(Settings(), cache, make_oracle(oracle_kind), reader=reader)

    padding = {path: b" " * size for path, size in (pads or {}).items()}

    async def echo(request: Request) -> Response:
        reply = orjson.dumps(orjson.loads(await request.body())) + padding.get(request.url.path, b"")
        return Response(reply, media_type="application/json")

    floor = Starlette(
        routes=[Route(p, echo, methods=["POST"]) for p in ("/filter", "/prioritize", "/filter-gang")]
    )
    return app, floor


def asgi_caller(app: Any, path: str, body: bytes | list[bytes]) -> Callable[[], bytes]:
    """A function that runs one POST through the ASGI app in-process and returns the reply body
    (``body`` a list: the bodies in turn, one per call)."""
    loop = asyncio.new_event_loop()
    bodies = itertools.cycle([body] if isinstance(body, bytes) else body)
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }

    async def once() -> bytes:
        sent = False
        out: list[bytes] = []
        body = next(bodies)
        call_scope = dict(scope)
        call_scope["headers"] = [*scope["headers"], (b"content-length", str(len(body)).encode())]

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and message["status"] != 200:
                raise RuntimeError(f"{path}: status {message['status']}")
            if message["type"] == "http.response.body":
                out.append(message.get("body", b""))

        await app(call_scope, receive, send)
        return b"".join(out)

    return lambda: loop.run_until_complete(once())


def timed(
    fn: Callable[[], Any], calls: int, warmup: int = 20, before: Callable[[], None] | None = None
) -> list[float]:
    """Seconds per call of ``fn`` (``before`` runs ahead of each call, outside the timing)."""
    for _ in range(warmup):
        if before is not None:
            before()
        fn()
    out = []
    for _ in range(calls):
        if before is not None:
            before()
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def shuffled_payloads(body: bytes, count: int, seed: int = 7) -> list[bytes]:
    """``body`` with its node names in ``count`` different orders: kube-scheduler's parallel filter
    hands the candidates over in a new order on every call, so a list seen before is the exception."""
    rng = random.Random(seed)
    args = orjson.loads(body)
    out = []
    for _ in range(count):
        names = list(args["NodeNames"])
        rng.shuffle(names)
        out.append(orjson.dumps({"Pod": args["Pod"], "Nodes": None, "NodeNames": names}))
    return out


def binder_churn(app: Any) -> Callable[[], None]:
    """A reservation made and released on alternate calls (as binds and watch events do between two
    scheduling cycles): the extender's cache changes before every call."""
    cache = app.state.cache
    state = [0]

    def churn() -> None:
        if state[0] % 2 == 0:
            cache.assume("load", "churn", "churn-uid", "gpu-00006", 1)
        else:
            cache.forget("load", "churn")
        state[0] += 1

    return churn


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(which: str, n: int, oracle_kind: str, port: int, core: int | None, pads: dict[str, int]) -> None:
    import logging

    import uvicorn

    if core is not None:
        os.sched_setaffinity(0, {core})
    from scheduler.commands.extender import server_options

    logging.disable(logging.WARNING)
    app, floor = build_apps(n, oracle_kind, pads)
    # both served as ``perfsched extender`` serves the extender (like for like)
    uvicorn.run(
        app if which == "extender" else floor,
        host="127.0.0.1",
        port=port,
        log_level="error",
        **server_options(),
    )


def http_caller(port: int, path: str, body: bytes) -> tuple[Callable[[], bytes], http.client.HTTPConnection]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"content-type": "application/json"}

    def call() -> bytes:
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{path}: HTTP {resp.status}: {data[:200]!r}")
        return data

    return call, conn


def wait_port(port: int, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"server on port {port} did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--sizes", default="1000,5000")
    ap.add_argument("--oracle", choices=["table", "predictor"], default="predictor")
    ap.add_argument("--no-http", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import logging

    logging.disable(logging.WARNING)
    try:
        make_oracle(args.oracle)
    except Exception as exc:
        print(f"(predictor oracle unavailable: {exc}; using the spec-ratio table oracle)")
        args.oracle = "table"
    load_before = os.getloadavg()[0]
    cores = sorted(os.sched_getaffinity(0))
    rows: list[dict[str, Any]] = []
    for n in [int(x) for x in args.sizes.split(",")]:
        body = payload(n)
        os.sched_setaffinity(0, {cores[0]})
        app, _ = build_apps(n, args.oracle)
        echo_size = len(orjson.dumps(orjson.loads(body)))
        sizes = {f"/{v}": len(asgi_caller(app, f"/{v}", body)()) for v in ("filter", "prioritize")}
        pads = {path: max(0, size - echo_size) for path, size in sizes.items()}
        app, floor = build_apps(n, args.oracle, pads)
        for verb in ("filter", "prioritize"):
            ext_call = asgi_caller(app, f"/{verb}", body)
            floor_call = asgi_caller(floor, f"/{verb}", body)
            if len(floor_call()) != len(ext_call()):
                raise RuntimeError(f"/{verb}: the floor's answer is not the extender's size")
            ext = timed(ext_call, args.calls)
            flo = timed(floor_call, args.calls)
            rows.append(_row("in-process", verb, n, ext, flo, len(body), sizes[f"/{verb}"]))
        # a new gang on every call (no plan yet): the gang placement runs over the whole cluster; then the
        # same, offered a new 10% sample of the nodes on every call: the candidates-only plan runs
        for label, share in (("filter-gang", 1.0), ("filter-gang-10%", 0.1), ("filter-gang-checked", 1.0)):
            checked = label == "filter-gang-checked"
            gangs = gang_payloads(n, args.calls + 40, share=share)
            gang_size = len(asgi_caller(app, "/filter", gangs[-1])())
            pads["/filter-gang"] = max(0, gang_size - len(orjson.dumps(orjson.loads(gangs[-1]))))
            app, floor = build_apps(n, args.oracle, pads, checked=checked)
            ext = timed(asgi_caller(app, "/filter", gangs), args.calls)
            flo = timed(asgi_caller(floor, "/filter-gang", gangs), args.calls)
            rows.append(_row("in-process", label, n, ext, flo, len(gangs[0]), gang_size))
        # the realistic cases: names in a new order on every call; the cache changed before every call
        orders = shuffled_payloads(body, 50)
        for verb in ("filter", "prioritize"):
            app, floor = build_apps(n, args.oracle, pads)
            ext = timed(asgi_caller(app, f"/{verb}", orders), args.calls)
            flo = timed(asgi_caller(floor, f"/{verb}", orders), args.calls)
            rows.append(_row("in-process", f"{verb}-order", n, ext, flo, len(body), sizes[f"/{verb}"]))
        # the same with names of varying lengths (EKS-style): the names' text is scanned for quotes
        mixed = payload(n, mixed=True)
        app, _ = build_apps(n, args.oracle, mixed=True)
        mixed_sizes = {f"/{v}": len(asgi_caller(app, f"/{v}", mixed)()) for v in ("filter", "prioritize")}
        mixed_echo = len(orjson.dumps(orjson.loads(mixed)))
        mixed_pads = {path: max(0, size - mixed_echo) for path, size in mixed_sizes.items()}
        mixed_orders = shuffled_payloads(mixed, 50)
        for verb in ("filter", "prioritize"):
            app, floor = build_apps(n, args.oracle, mixed_pads, mixed=True)
            ext = timed(asgi_caller(app, f"/{verb}", mixed_orders), args.calls)
            flo = timed(asgi_caller(floor, f"/{verb}", mixed_orders), args.calls)
            size = mixed_sizes[f"/{verb}"]
            rows.append(_row("in-process", f"{verb}-order-mixed", n, ext, flo, len(mixed), size))
        for verb in ("filter", "prioritize"):
            app, floor = build_apps(n, args.oracle, pads)
            ext = timed(asgi_caller(app, f"/{verb}", body), args.calls, before=binder_churn(app))
            flo = timed(asgi_caller(floor, f"/{verb}", body), args.calls)
            rows.append(_row("in-process", f"{verb}-churn", n, ext, flo, len(body), sizes[f"/{verb}"]))
        os.sched_setaffinity(0, set(cores))
        if args.no_http:
            continue
        ctx = mp.get_context("spawn")
        core = cores[-1] if len(cores) > 1 else None
        for verb in ("filter", "prioritize"):
            results: dict[str, list[float]] = {}
            for which in ("extender", "floor"):
                port = _free_port()
                proc = ctx.Process(target=_serve, args=(which, n, args.oracle, port, core, pads), daemon=True)
                proc.start()
                try:
                    wait_port(port)
                    call, conn = http_caller(port, f"/{verb}", body)
                    results[which] = timed(call, args.calls)
                    conn.close()
                finally:
                    proc.terminate()
                    proc.join(5)
            rows.append(
                _row(
                    "loopback HTTP",
                    verb,
                    n,
                    results["extender"],
                    results["floor"],
                    len(body),
                    sizes[f"/{verb}"],
                )
            )
    load = (load_before, os.getloadavg()[0])
    if args.json:
        print(
            json.dumps(
                {
                    "oracle": args.oracle,
                    "load_avg_1m": load,
                    "cpus": len(cores),
                    "server": _server_kind(),
                    "rows": rows,
                },
                indent=2,
            )
        )
        return
    print(
        f"extender latency ({args.calls} calls each, oracle={args.oracle}, payload: 2-GPU pod, node names; "
        f"{len(cores)} CPUs, 1-min load average {load[0]:.1f} -> {load[1]:.1f})"
    )
    print(
        "floor: Starlette + orjson, same transport, parses the same body and answers as many bytes "
        f"as the extender (request and reply sizes in bytes below); loopback server: uvicorn, "
        f"{_server_kind()}"
    )
    print(
        f"{'mode':<14} {'verb':<22} {'nodes':>6} {'req B':>7} {'reply B':>8} {'min ms':>7} {'p50 ms':>7} "
        f"{'p99 ms':>7} {'floor min':>9} {'floor p50':>9} {'floor p99':>9} "
        f"{'ratio min':>9} {'ratio p50':>9} {'ratio p99':>9}"
    )
    for r in rows:
        print(
            f"{r['mode']:<14} {r['verb']:<22} {r['nodes']:>6} {r['request_bytes']:>7} {r['reply_bytes']:>8} "
            f"{r['min_ms']:>7.3f} {r['p50_ms']:>7.3f} {r['p99_ms']:>7.3f} {r['floor_min_ms']:>9.3f} "
            f"{r['floor_p50_ms']:>9.3f} {r['floor_p99_ms']:>9.3f} {r['ratio_min']:>9.2f} "
            f"{r['ratio_p50']:>9.2f} {r['ratio_p99']:>9.2f}"
        )


def _server_kind() -> str:
    """What uvicorn's "auto" picks here, as ``perfsched extender`` asks for uvloop and httptools."""
    import importlib.util

    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    return f"loop {loop}, http {http}"


def _row(
    mode: str, verb: str, n: int, ext: list[float], flo: list[float], request_bytes: int, reply_bytes: int
) -> dict[str, Any]:
    p50, p99, f50, f99 = pct(ext, 0.5), pct(ext, 0.99), pct(flo, 0.5), pct(flo, 0.99)
    return {
        "mode": mode,
        "verb": verb,
        "nodes": n,
        "request_bytes": request_bytes,
        "reply_bytes": reply_bytes,
        "ratio_min": min(ext) / min(flo),
        "min_ms": min(ext) * 1000,
        "floor_min_ms": min(flo) * 1000,
        "p50_ms": p50,
        "p99_ms": p99,
        "mean_ms": statistics.fmean(ext) * 1000,
        "floor_p50_ms": f50,
        "floor_p99_ms": f99,
        "ratio_p50": p50 / f50,
        "ratio_p99": p99 / f99,
    }


if __name__ == "__main__":
    main()
