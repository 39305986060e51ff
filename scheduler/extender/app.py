"""The extender's HTTP application: ``create_app()`` builds the FastAPI app kube-scheduler calls.

Shell module. Routes: ``POST /filter``, ``/prioritize``, ``/bind``, ``/preempt`` (wire format in
``scheduler.extender.wire``), ``GET /healthz`` (the process answers), ``/readyz`` (503 until the cache
has listed every kind once), ``/metrics`` (Prometheus text). Nothing is built at import time.

Hot path: ``POST /filter`` and ``/prioritize`` are answered by plain ASGI handlers before FastAPI's
routing (its routes for them stay, for the OpenAPI schema, and answer through the same functions);
bodies are read with a size limit; a body that ends with its ``NodeNames`` array has only the rest
(the pod) parsed with orjson and its names found from the array's text (``_text_route``,
``Decider.filter_text``); any other body, or one that route declines, is parsed whole with orjson and
its structure checked by hand (``parse_extender_args``). The answer comes from the precomputed cache
without awaiting anything, so a call costs one small parse, a few numpy passes over the names' text
and one join. Bind does API I/O in the thread pool. Bad input never causes a 500: malformed JSON or a
wrong shape is a 400 and an oversized body a 413, each with ``{"Error": message}`` naming the field;
an unexpected failure inside filter becomes the wire's ``Error`` field (the scheduling attempt fails
and is retried) and inside prioritize all-zero scores (kube-scheduler ignores prioritize errors
anyway).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import orjson
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from starlette.types import Receive, Scope, Send

from scheduler import metrics
from scheduler.core.errors import ConfigError, PermanentError
from scheduler.core.protocols import ThroughputOracle
from scheduler.extender import wire
from scheduler.extender.decide import Decider, FastFilter, FilterOutcome, Weights
from scheduler.k8s.cache import ClusterCache, Kind
from scheduler.k8s.codec import pod_gpu_request
from scheduler.settings import Settings

log = logging.getLogger(__name__)

_JSON = "application/json"


class Binder(Protocol):
    """Creates Bindings and records placements (``scheduler.k8s.binder.KubeBinder``; fakes in tests).

    ``bind`` raises ``PermanentError`` when binding cannot succeed (the pod is gone or bound elsewhere)
    and any other exception for failures a retry may fix; binding a pod again to the node it is already
    on succeeds. ``record_placement`` merges ``{pod name: node}`` into the TrainingJob's placement.
    """

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None: ...

    def record_placement(self, namespace: str, job_name: str, placement: dict[str, str]) -> None: ...


class _Children:
    """A labelled metric's children by label value, resolved once each (``labels()`` takes a lock)."""

    def __init__(self, metric: Any) -> None:
        self._metric = metric
        self._children: dict[str, Any] = {}

    def __getitem__(self, label: str) -> Any:
        child = self._children.get(label)
        if child is None:
            child = self._children[label] = self._metric.labels(label)
        return child


class _HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def host_priority_list(
    names: Sequence[str], keys: Sequence[Any], scores: Mapping[Any, int], *, plain: bool | None = None
) -> bytes:
    """The wire's HostPriorityList ``[{"Host": names[i], "Score": scores[keys[i]]}, ...]`` as JSON bytes.

    Byte-for-byte what ``orjson.dumps`` gives for the list of dicts, built without a dict per node: node
    names are DNS names that need no escaping, so the names and their classes' prebuilt tails are
    interleaved and joined at C speed; a name that might need escaping (a quote, a backslash, a control
    character, anything not ASCII) sends the whole list through orjson instead. ``plain`` is
    ``wire.plain_names(names)`` when the caller knows it already.
    """
    if len(keys) != len(names):
        raise ValueError(f"{len(names)} names but {len(keys)} class keys")
    if not names:
        return b"[]"
    if plain is None:
        plain = wire.plain_names(names)
    if not plain:
        return orjson.dumps([{"Host": h, "Score": scores[k]} for h, k in zip(names, keys, strict=True)])
    tails = {k: f'","Score":{int(s)}}},{{"Host":"' for k, s in scores.items()}
    parts: list[str] = [""] * (2 * len(names) + 1)
    parts[0] = '[{"Host":"'
    parts[1::2] = names
    parts[2::2] = map(tails.__getitem__, keys)
    parts[-1] = parts[-1][: -len(',{"Host":"')] + "]"
    return "".join(parts).encode()


#: what follows a node name in a HostPriorityList, per score 0..10
_SCORE_TAILS = np.array([f'","Score":{s}}},{{"Host":"' for s in range(11)], dtype=object)


def host_priority_bytes(names: Sequence[str], scores: Any) -> bytes:
    """``host_priority_list`` for names that need no escaping and a numpy array of scores (0..10), one
    per name: the names and their scores' prebuilt tails interleaved and joined at C speed."""
    if len(scores) != len(names):
        raise ValueError(f"{len(names)} names but {len(scores)} scores")
    if not names:
        return b"[]"
    parts: list[str] = [""] * (2 * len(names) + 1)
    parts[0] = '[{"Host":"'
    parts[1::2] = names
    parts[2::2] = _SCORE_TAILS[scores].tolist()
    parts[-1] = parts[-1][: -len(',{"Host":"')] + "]"
    return "".join(parts).encode()


def host_priority_pieces(pieces: list[bytes]) -> bytes:
    """A HostPriorityList from each node's piece, ``name","Score":s},{"Host":"`` as bytes
    (``NodeTable.host_pieces``), in order."""
    if not pieces:
        return b"[]"
    pieces[-1] = pieces[-1][: -len(b',{"Host":"')] + b"]"
    pieces.insert(0, b'[{"Host":"')
    return b"".join(pieces)


def _text_route(body: bytes) -> tuple[dict[str, Any], bytes] | None:
    """The pod and the ``NodeNames`` array's JSON text of a body that ends with that array and whose
    rest decodes (``wire.split_names``) to an object with a well-formed pod; None otherwise (the body
    then takes the ordinary route, which decodes it whole and answers every error)."""
    split = wire.split_names(body)
    if split is None:
        return None
    head, text = split
    try:
        obj = orjson.loads(head)
    except orjson.JSONDecodeError:
        return None
    if type(obj) is not dict or obj.get("NodeNames", 0) is not None:
        return None
    try:
        return wire.request_pod(obj), text
    except wire.WireError:
        return None


def _json(obj: Any, status: int = 200) -> Response:
    return Response(content=orjson.dumps(obj), status_code=status, media_type=_JSON)


def _check_length(length: str | None, limit: int) -> None:
    if length is not None:
        try:
            if int(length) > limit:
                raise _HTTPError(413, f"request body of {length} bytes is over the limit of {limit} bytes")
        except ValueError:
            raise _HTTPError(400, f"Content-Length header is not a number: {length!r}") from None


def _parse_json(body: bytes) -> Any:
    if not body:
        raise _HTTPError(400, "request body is empty: expected a JSON object")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise _HTTPError(400, f"request body is not valid JSON: {exc}") from None


async def _read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing bodies over ``limit`` bytes (413)."""
    _check_length(request.headers.get("content-length"), limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _HTTPError(413, f"request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _read_json(request: Request, limit: int) -> Any:
    """The request body as JSON, refusing bodies over ``limit`` bytes (413) and bad JSON (400)."""
    return _parse_json(await _read_body(request, limit))


class _Disconnected(Exception):
    """The client went away before sending the whole body."""


async def _receive_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """``_read_body`` on the raw ASGI messages (the hot verbs' path, without a ``Request`` object)."""
    for key, value in scope["headers"]:
        if key == b"content-length":
            _check_length(value.decode("latin-1"), limit)
            break
    message = await receive()
    if message["type"] != "http.request":
        raise _Disconnected
    body: bytes = message.get("body", b"")
    if len(body) > limit:
        raise _HTTPError(413, f"request body is over the limit of {limit} bytes")
    if message.get("more_body", False):
        chunks = [body]
        size = len(body)
        while True:
            message = await receive()
            if message["type"] != "http.request":
                raise _Disconnected
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _HTTPError(413, f"request body is over the limit of {limit} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
    return body


_Handler = Callable[[Scope, Receive, Send], Awaitable[None]]


class _ExtenderApp(FastAPI):
    """FastAPI, with the hot verbs (``POST /filter``, ``/prioritize``) answered before its routing.

    kube-scheduler calls filter and prioritize for every pod; FastAPI's middleware stack, router and
    endpoint machinery cost about as much as the decision itself, so ``__call__`` sends those two
    requests straight to plain ASGI handlers. The FastAPI routes for them stay (the OpenAPI schema and
    every other route are FastAPI's, and the routes answer the same way through the same functions).
    """

    hot_routes: dict[str, _Handler]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path: str = scope["path"]
            root = scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root) :]
            handler = self.hot_routes.get(path)
            if handler is not None:
                await handler(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


_JSON_HEADERS = [(b"content-type", b"application/json")]


async def _send_json(send: Send, status: int, body: bytes) -> None:
    """The same response Starlette's ``Response(body, status, media_type=JSON)`` sends."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-length", str(len(body)).encode()), *_JSON_HEADERS],
        }
    )
    await send({"type": "http.response.body", "body": body})


class _Predictions:
    """Bookkeeping for the predictor metrics (calls, hits, misses, hit ratio)."""

    def __init__(self) -> None:
        self.hits = 0
        self.total = 0

    def __call__(self, sent: int, hits: int, misses: int) -> None:
        if sent:
            metrics.EXTENDER_PREDICTOR_CALLS.inc()
        if hits:
            metrics.EXTENDER_PREDICTOR_ROWS.labels("hit").inc(hits)
        if misses:
            metrics.EXTENDER_PREDICTOR_ROWS.labels("miss").inc(misses)
        self.hits += hits
        self.total += hits + misses
        if self.total:
            metrics.EXTENDER_PREDICTOR_HIT_RATIO.set(self.hits / self.total)


def _openapi_schemas() -> dict[str, Any]:
    models: list[type[BaseModel]] = [
        wire.ExtenderArgs,
        wire.ExtenderFilterResult,
        wire.HostPriority,
        wire.ExtenderBindingArgs,
        wire.ExtenderBindingResult,
        wire.ExtenderPreemptionArgs,
        wire.ExtenderPreemptionResult,
    ]
    _, top = models_json_schema(
        [(m, "validation") for m in models], ref_template="#/components/schemas/{model}"
    )
    defs: dict[str, Any] = top.get("$defs", {})
    return defs


def _body(name: str) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {_JSON: {"schema": {"$ref": f"#/components/schemas/{name}"}}},
        }
    }


def _reply(schema: dict[str, Any], description: str) -> dict[int | str, dict[str, Any]]:
    return {
        200: {"description": description, "content": {_JSON: {"schema": schema}}},
        400: {"description": 'malformed body; {"Error": message naming the field}'},
        413: {"description": "body over the size limit"},
    }


def create_app(
    settings: Settings,
    cache: ClusterCache,
    oracle: ThroughputOracle | None,
    *,
    binder: Binder | None = None,
    registry: CollectorRegistry | None = None,
) -> FastAPI:
    """Build the extender app over a (started or test-fed) cache, a throughput oracle and a binder.

    ``binder`` None disables ``/bind`` (kube-scheduler's DefaultBinder binds instead; configure the
    scheduler without ``bindVerb`` then). ``registry`` is what ``/metrics`` serves (default: perfsched's).
    """
    limit = settings.extender_max_body_bytes
    predictions = _Predictions()
    decider = Decider(
        cache,
        oracle,
        weights=Weights(
            throughput=settings.extender_weight_throughput,
            locality=settings.extender_weight_locality,
            packing=settings.extender_weight_packing,
        ),
        predict_cache_size=settings.extender_predict_cache_size,
        on_predict=predictions,
    )
    name_texts = wire.NameTexts()
    served_registry = registry or metrics.REGISTRY
    exported_restarts: dict[tuple[str, str], int] = {}

    app = _ExtenderApp(
        title="perfsched scheduler extender",
        version="v1",
        description="k8s.io/kube-scheduler/extender/v1 webhook: filter, prioritize, bind and preempt "
        "by predicted throughput.",
    )
    app.state.decider = decider
    app.state.cache = cache

    # labelled children resolved once: ``labels()`` takes a lock and a dict lookup on every call
    latency = {
        v: metrics.EXTENDER_REQUEST_SECONDS.labels(v) for v in ("filter", "prioritize", "bind", "preempt")
    }
    ok = {v: metrics.EXTENDER_REQUESTS.labels(v, "200") for v in latency}
    nodes_in = metrics.EXTENDER_FILTER_NODES.labels("in")
    nodes_passed = metrics.EXTENDER_FILTER_NODES.labels("passed")
    rejections = _Children(metrics.EXTENDER_REJECTIONS)

    def _done(verb: str, start: float, code: int) -> None:
        latency[verb].observe(time.perf_counter() - start)
        if code == 200:
            ok[verb].inc()
        else:
            metrics.EXTENDER_REQUESTS.labels(verb, str(code)).inc()

    def _bad(verb: str, start: float, status: int, message: str) -> tuple[int, bytes]:
        log.info("bad %s request: %s", verb, message)
        _done(verb, start, status)
        return status, orjson.dumps({"Error": message})

    def filter_text(body: bytes) -> FastFilter | None:
        """The filter answer when the body's names are found from its text (``Decider.filter_text``);
        None sends the body the ordinary way, which answers anything else (errors included) as if
        this had not been tried."""
        route = _text_route(body)
        if route is None:
            return None
        try:
            return decider.filter_text(*route)
        except Exception:
            return None

    def filter_answer(body: bytes | _HTTPError, start: float) -> tuple[int, bytes]:
        """Status and reply of a filter request (``body``: the request's bytes, or the error reading it)."""
        try:
            if isinstance(body, _HTTPError):
                raise body
            fast = filter_text(body)
            if fast is not None:
                asked = fast.asked
            else:
                args = wire.parse_extender_args(_parse_json(body), body, name_texts)
                asked = len(args.names)
                fast = (
                    decider.filter_fast(args.pod, args.names, args.names_key)
                    if args.node_objects is None and args.plain
                    else None
                )
            if fast is None:
                outcome = decider.filter(args.pod, args.names, args.node_objects)
        except _HTTPError as exc:
            return _bad("filter", start, exc.status, exc.message)
        except (wire.WireError, ConfigError) as exc:
            return _bad("filter", start, 400, str(exc))
        except Exception as exc:
            log.exception("filter failed")
            _done("filter", start, 200)
            return 200, orjson.dumps(
                {
                    "Nodes": None,
                    "NodeNames": None,
                    "FailedNodes": None,
                    "FailedAndUnresolvableNodes": None,
                    "Error": f"perfsched: internal error in filter: {exc}",
                }
            )
        if fast is not None:
            reply, passed, categories = fast.reply, fast.passed, fast.categories
        else:
            reply, passed, categories = _filter_reply(outcome, args), len(outcome.passed), outcome.categories
        nodes_in.observe(asked)
        nodes_passed.observe(passed)
        for reason, n in categories.items():
            rejections[reason].inc(n)
        _done("filter", start, 200)
        return 200, reply

    def prioritize_answer(body: bytes | _HTTPError, start: float) -> tuple[int, bytes]:
        """Status and reply of a prioritize request (``body``: as for ``filter_answer``)."""
        route = _text_route(body) if not isinstance(body, _HTTPError) else None
        if route is not None:
            try:
                found = decider.prioritize_text(*route)
            except Exception:
                found = None  # the ordinary route answers it
            if found is not None:
                idx, text_scores = found
                reply = host_priority_pieces(decider.table.host_pieces()[idx * 11 + text_scores].tolist())
                _done("prioritize", start, 200)
                return 200, reply
        try:
            if isinstance(body, _HTTPError):
                raise body
            args = wire.parse_extender_args(_parse_json(body), body, name_texts)
        except _HTTPError as exc:
            return _bad("prioritize", start, exc.status, exc.message)
        except wire.WireError as exc:
            return _bad("prioritize", start, 400, str(exc))
        try:
            fast = (
                decider.prioritize_fast(args.pod, args.names, args.names_key)
                if args.node_objects is None and args.plain
                else None
            )
            if fast is not None:
                reply = host_priority_bytes(args.names, fast)
            else:
                keys, scores = decider.prioritize_classes(args.pod, args.names, args.node_objects)
                reply = host_priority_list(args.names, keys, scores, plain=args.plain)
        except ConfigError as exc:
            return _bad("prioritize", start, 400, str(exc))
        except Exception:
            log.exception("prioritize failed; answering neutral scores")
            reply = host_priority_list(args.names, [None] * len(args.names), {None: 0}, plain=args.plain)
        _done("prioritize", start, 200)
        return 200, reply

    def hot(answer: Callable[[bytes | _HTTPError, float], tuple[int, bytes]]) -> _Handler:
        async def handler(scope: Scope, receive: Receive, send: Send) -> None:
            start = time.perf_counter()
            body: bytes | _HTTPError
            try:
                body = await _receive_body(scope, receive, limit)
            except _HTTPError as exc:
                body = exc
            except _Disconnected:
                return  # nobody to answer
            status, reply = answer(body, start)
            await _send_json(send, status, reply)

        return handler

    app.hot_routes = {"/filter": hot(filter_answer), "/prioritize": hot(prioritize_answer)}

    async def _answer_request(
        request: Request, answer: Callable[[bytes | _HTTPError, float], tuple[int, bytes]]
    ) -> Response:
        start = time.perf_counter()
        body: bytes | _HTTPError
        try:
            body = await _read_body(request, limit)
        except _HTTPError as exc:
            body = exc
        status, reply = answer(body, start)
        return Response(content=reply, status_code=status, media_type=_JSON)

    @app.post(
        "/filter",
        openapi_extra=_body("ExtenderArgs"),
        responses=_reply({"$ref": "#/components/schemas/ExtenderFilterResult"}, "ExtenderFilterResult"),
    )
    async def filter_(request: Request) -> Response:
        return await _answer_request(request, filter_answer)

    @app.post(
        "/prioritize",
        openapi_extra=_body("ExtenderArgs"),
        responses=_reply(
            {"type": "array", "items": {"$ref": "#/components/schemas/HostPriority"}}, "HostPriorityList"
        ),
    )
    async def prioritize(request: Request) -> Response:
        return await _answer_request(request, prioritize_answer)

    def _bad_response(verb: str, start: float, status: int, message: str) -> Response:
        code, body = _bad(verb, start, status, message)
        return Response(content=body, status_code=code, media_type=_JSON)

    @app.post(
        "/bind",
        openapi_extra=_body("ExtenderBindingArgs"),
        responses=_reply({"$ref": "#/components/schemas/ExtenderBindingResult"}, "ExtenderBindingResult"),
    )
    async def bind(request: Request) -> Response:
        start = time.perf_counter()
        try:
            args = wire.parse_binding_args(await _read_json(request, limit))
        except _HTTPError as exc:
            return _bad_response("bind", start, exc.status, exc.message)
        except wire.WireError as exc:
            return _bad_response("bind", start, 400, str(exc))
        if binder is None:
            _done("bind", start, 200)
            metrics.EXTENDER_BINDS.labels("error").inc()
            return _json({"Error": "perfsched: this extender was started without a binder"})
        error = await _bind(args)
        _done("bind", start, 200)
        return _json({"Error": error})

    async def _bind(args: wire.ExtenderBindingArgs) -> str:
        assert binder is not None
        ns, name, node = args.PodNamespace, args.PodName, args.Node
        pod = cache.pod(ns, name)
        if pod is not None and pod.uid and args.PodUID and pod.uid != args.PodUID:
            pod = None  # the cache holds an older pod of the same name
        if pod is not None and pod.node_name:
            if pod.node_name == node:
                metrics.EXTENDER_BINDS.labels("success").inc()
                return ""  # idempotent: it is already there
            metrics.EXTENDER_BINDS.labels("error").inc()
            return f"perfsched: pod {ns}/{name} is already bound to {pod.node_name}"
        gpus = pod.gpus if pod is not None else 0
        refused = cache.reserve(ns, name, args.PodUID, node, gpus)
        if refused is not None:
            metrics.EXTENDER_BINDS.labels("error").inc()
            return refused
        try:
            await run_in_threadpool(binder.bind, ns, name, args.PodUID, node)
        except PermanentError as exc:
            cache.forget(ns, name)
            metrics.EXTENDER_BINDS.labels("error").inc()
            return f"perfsched: {exc}"
        except Exception as exc:
            cache.forget(ns, name)
            metrics.EXTENDER_BINDS.labels("temporary_error").inc()
            log.warning("bind of %s/%s to %s failed: %s", ns, name, node, exc)
            return f"perfsched: binding {ns}/{name} to {node} failed: {exc}"
        metrics.EXTENDER_BINDS.labels("success").inc()
        if pod is not None and pod.job and settings.extender_record_placement:
            job_ns, _, job_name = pod.job.partition("/")
            try:
                await run_in_threadpool(binder.record_placement, job_ns, job_name, {name: node})
                metrics.EXTENDER_PLACEMENT_RECORDS.labels("success").inc()
            except Exception as exc:
                metrics.EXTENDER_PLACEMENT_RECORDS.labels("error").inc()
                log.warning("could not record placement of %s/%s on %s: %s", ns, name, pod.job, exc)
        return ""

    @app.post(
        "/preempt",
        openapi_extra=_body("ExtenderPreemptionArgs"),
        responses=_reply(
            {"$ref": "#/components/schemas/ExtenderPreemptionResult"}, "ExtenderPreemptionResult"
        ),
    )
    async def preempt(request: Request) -> Response:
        start = time.perf_counter()
        try:
            args = wire.parse_preemption_args(await _read_json(request, limit))
            candidates = _preempt_candidates(args)
            kept = decider.preempt(args.Pod, candidates)
        except _HTTPError as exc:
            return _bad_response("preempt", start, exc.status, exc.message)
        except (wire.WireError, ConfigError) as exc:
            return _bad_response("preempt", start, 400, str(exc))
        meta = args.NodeNameToMetaVictims or {}
        full = args.NodeNameToVictims or {}
        out: dict[str, Any] = {}
        for node, uids in kept.items():
            pdb = (
                meta[node].NumPDBViolations
                if node in meta
                else full[node].NumPDBViolations
                if node in full
                else 0
            )
            out[node] = {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": pdb}
        _done("preempt", start, 200)
        return _json({"NodeNameToMetaVictims": out})

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response(content=b"ok", media_type="text/plain")

    @app.get("/readyz")
    async def readyz() -> Response:
        if cache.synced:
            return Response(content=b"ok", media_type="text/plain")
        return _json({"ready": False, "waiting_for": cache.unsynced()}, 503)

    @app.get("/metrics")
    async def metrics_() -> Response:
        for kind in Kind:
            age = cache.age(kind)
            metrics.EXTENDER_CACHE_AGE_SECONDS.labels(kind.value).set(age if age != float("inf") else -1)
        for key, count in list(cache.watch_restarts.items()):
            delta = count - exported_restarts.get(key, 0)
            if delta > 0:
                metrics.EXTENDER_WATCH_RESTARTS.labels(*key).inc(delta)
                exported_restarts[key] = count
        return Response(content=generate_latest(served_registry), media_type=CONTENT_TYPE_LATEST)

    schemas = _openapi_schemas()

    def custom_openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            spec = get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes
            )
            spec.setdefault("components", {}).setdefault("schemas", {}).update(schemas)
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = custom_openapi  # type: ignore[method-assign]
    return app


def _filter_reply(outcome: FilterOutcome, args: wire.ParsedArgs) -> bytes:
    if args.node_objects is not None:
        if not outcome.managed:
            items = args.node_objects
        else:
            keep = set(outcome.passed)
            items = [obj for obj, n in zip(args.node_objects, args.names, strict=True) if n in keep]
        return orjson.dumps(
            {
                "Nodes": {"metadata": {}, "items": items},
                "NodeNames": None,
                "FailedNodes": outcome.failed,
                "FailedAndUnresolvableNodes": outcome.unresolvable,
                "Error": "",
            }
        )
    return orjson.dumps(
        {
            "Nodes": None,
            "NodeNames": outcome.passed,
            "FailedNodes": outcome.failed,
            "FailedAndUnresolvableNodes": outcome.unresolvable,
            "Error": "",
        }
    )


def _preempt_candidates(args: wire.ExtenderPreemptionArgs) -> dict[str, list[tuple[str, int | None]]]:
    """node -> [(victim UID, victim GPUs or None when only the UID is known)]."""
    out: dict[str, list[tuple[str, int | None]]] = {}
    if args.NodeNameToMetaVictims is not None:
        for node, mv in args.NodeNameToMetaVictims.items():
            out[node] = [(p.UID, None) for p in (mv.Pods or [])]
    if args.NodeNameToVictims is not None:
        for node, v in args.NodeNameToVictims.items():
            victims: list[tuple[str, int | None]] = []
            for i, pod in enumerate(v.Pods or []):
                meta = pod.get("metadata") if isinstance(pod, dict) else None
                uid = meta.get("uid") if isinstance(meta, dict) else None
                if not isinstance(uid, str) or not uid:
                    raise wire.WireError(f"NodeNameToVictims[{node}].Pods[{i}].metadata.uid: missing")
                victims.append((uid, pod_gpu_request(pod, f"NodeNameToVictims[{node}].Pods[{i}]")))
            out[node] = victims
    return out
