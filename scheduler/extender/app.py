"""The extender's HTTP application: ``create_app()`` builds the FastAPI app kube-scheduler calls.

Shell module. Routes (FastAPI's own router; each a thin call into ``service.ExtenderService``):
``POST /filter``, ``/prioritize``, ``/bind``, ``/preempt`` (wire format in ``scheduler.extender.wire``),
``GET /healthz``, ``/readyz`` (503 until the cache has listed every kind once; 200 through an API outage,
as the cache still answers), ``/metrics``. Bodies are size-limited (413). While the app runs, a task
records bound gang replicas in their TrainingJob's ``status.placement`` twice a second. Nothing is built
at import time.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from scheduler import metrics
from scheduler.core.protocols import ThroughputOracle
from scheduler.extender import wire
from scheduler.extender.service import Binder, ExtenderService, PodReader, Reply
from scheduler.k8s.cache import ClusterCache, Kind
from scheduler.settings import Settings

_JSON = "application/json"
#: the verbs, each with the wire types of its request and reply
_VERBS = (
    ("filter", "ExtenderArgs", "ExtenderFilterResult"),
    ("prioritize", "ExtenderArgs", "HostPriorityList"),
    ("bind", "ExtenderBindingArgs", "ExtenderBindingResult"),
    ("preempt", "ExtenderPreemptionArgs", "ExtenderPreemptionResult"),
)
#: how often bound gang replicas are recorded in their TrainingJob's ``status.placement``
_PLACEMENT_PERIOD_S = 0.5

__all__ = ["Binder", "PodReader", "create_app"]


async def _read_body(request: Request, limit: int) -> bytes:
    """The request body; ``WireError`` (413) over ``limit`` bytes, (400) for a bad Content-Length."""
    length = request.headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise wire.WireError(f"Content-Length header is not a number: {wire.quote(length, 64)}")
        if int(length) > limit:
            raise wire.WireError(f"request body of {length} bytes is over the limit of {limit} bytes", 413)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise wire.WireError(f"request body is over the limit of {limit} bytes", 413)
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(
    settings: Settings,
    cache: ClusterCache,
    oracle: ThroughputOracle | None,
    *,
    binder: Binder | None = None,
    reader: PodReader | None = None,
    registry: CollectorRegistry | None = None,
) -> FastAPI:
    """Build the extender app over a (started or test-fed) cache, a throughput oracle and a binder.

    ``binder`` None disables ``/bind`` (kube-scheduler's DefaultBinder binds instead; configure the
    scheduler without ``bindVerb`` then). ``reader`` reads the pods on a gang plan's nodes from the API server
    before filter passes them (None: plans are made and used on the cache alone, which can lag a pod bound
    around the extender). ``registry`` is what ``/metrics`` serves (default: perfsched's).
    """
    service = ExtenderService(settings, cache, oracle, binder, reader)
    limit = settings.extender_max_body_bytes

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_every, _PLACEMENT_PERIOD_S, service.record_placements, service)
            yield
            tasks.cancel_scope.cancel()

    app = FastAPI(
        lifespan=lifespan,
        # the extender's metrics are Prometheus (``/metrics``); FastAPI's native OpenTelemetry would look
        # up the global providers on every call, ~half the cost of an empty route (kube-scheduler waits)
        telemetry={"tracing": False, "metrics": False, "logs": False},
        title="perfsched scheduler extender",
        version="v1",
        description="k8s.io/kube-scheduler/extender/v1 webhook: filter, prioritize, bind and preempt "
        "by predicted throughput.",
    )
    app.state.cache = cache
    for verb, _, _ in _VERBS:
        # a plain route on FastAPI's router: kube-scheduler waits on every call, and the service parses
        # and checks the body itself, so FastAPI's parameter machinery would only cost time
        app.router.add_route(f"/{verb}", _route(verb, service, limit), methods=["POST"], name=verb)
    _add_probes(app, cache, registry or metrics.REGISTRY)

    def custom_openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        spec = FastAPI.openapi(app)  # the probes' paths; sets app.openapi_schema, which this completes
        spec.setdefault("components", {}).setdefault("schemas", {}).update(_openapi_schemas())
        spec.setdefault("paths", {}).update(_verb_paths())
        return spec

    app.openapi = custom_openapi  # type: ignore[method-assign]
    return app


async def _every(period_s: float, call: Callable[[], Awaitable[None]], service: ExtenderService) -> None:
    while True:
        await anyio.sleep(period_s)
        try:
            await call()
        except Exception as exc:  # a bug: counted and logged; the next round tries again
            service.failed("placement", exc, b"")


def _route(verb: str, service: ExtenderService, limit: int) -> Callable[[Request], Awaitable[Response]]:
    call: Callable[[bytes, float], Reply | Awaitable[Reply]] = getattr(service, verb)

    async def route(request: Request) -> Response:
        start = time.perf_counter()
        try:
            body = await _read_body(request, limit)
        except wire.WireError as exc:
            status, reply = service.bad(verb, start, exc)
        else:
            result = call(body, start)
            status, reply = await result if isinstance(result, Awaitable) else result
        return Response(content=reply, status_code=status, media_type=_JSON)

    return route


def _add_probes(app: FastAPI, cache: ClusterCache, registry: CollectorRegistry) -> None:
    """``/healthz``, ``/readyz`` and ``/metrics``."""
    exported_restarts: dict[tuple[str, str], int] = {}

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response(content=b"ok", media_type="text/plain")

    @app.get("/readyz")
    async def readyz() -> Response:
        if cache.synced:
            return Response(content=b"ok", media_type="text/plain")
        body = orjson.dumps({"ready": False, "waiting_for": cache.unsynced()})
        return Response(content=body, status_code=503, media_type=_JSON)

    @app.get("/metrics")
    async def metrics_() -> Response:
        cache.health.tick()  # an ongoing API outage counts up to this scrape
        for kind in Kind:
            age = cache.age(kind)
            metrics.EXTENDER_CACHE_AGE_SECONDS.labels(kind.value).set(age if age != float("inf") else -1)
        for key, count in list(cache.watch_restarts.items()):
            delta = count - exported_restarts.get(key, 0)
            if delta > 0:
                metrics.EXTENDER_WATCH_RESTARTS.labels(*key).inc(delta)
                exported_restarts[key] = count
        return Response(content=generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _openapi_schemas() -> dict[str, Any]:
    models: list[type[BaseModel]] = [wire.ExtenderArgs, wire.ExtenderFilterResult, wire.HostPriority]
    models += [wire.ExtenderBindingArgs, wire.ExtenderBindingResult]
    models += [wire.ExtenderPreemptionArgs, wire.ExtenderPreemptionResult]
    _, top = models_json_schema([(m, "validation") for m in models], ref_template=_ref("{model}")["$ref"])
    return dict(top.get("$defs", {}))


def _verb_paths() -> dict[str, Any]:
    """The OpenAPI paths of the four verbs (plain routes, which FastAPI does not describe itself)."""
    paths: dict[str, Any] = {}
    for verb, request, reply in _VERBS:
        schema = {"type": "array", "items": _ref("HostPriority")} if verb == "prioritize" else _ref(reply)
        responses = {
            200: {"description": reply, "content": {_JSON: {"schema": schema}}},
            400: {"description": 'malformed body; {"Error": message naming the field}'},
            413: {"description": "body over the size limit"},
        }
        body = {"required": True, "content": {_JSON: {"schema": _ref(request)}}}
        paths[f"/{verb}"] = {"post": {"operationId": verb, "requestBody": body, "responses": responses}}
    return paths
