"""A floor extender for ``bench/extender_e2e.py --floors``: the protocol's cost with no decisions.

Serves kube-scheduler's filter and prioritize verbs as cheaply as Python can while speaking the same
protocol as ``perfsched extender``: Starlette + orjson, served by uvicorn with the extender's own
``server_options()`` (uvloop, httptools, one write per reply). Filter passes every candidate (the reply
lists them all, as a real extender's reply does when every node fits) and prioritize gives every
candidate the same score, so kube-scheduler does all of an extender's work per pod (marshal the pod and
the names, two HTTP calls, decode replies of the same shape) while the extender does almost none.
The pods land where kube-scheduler's own scores put them: this is a measuring stick, not a scheduler.

``--watch`` also runs the extender's real ``ClusterCache`` (list + watch of nodes, pods and
TrainingJobs through ``KubeListWatch``) and decodes each request's pod under the cache's lock, as the
extender does before deciding: the watches' cost to the API server and to the process, without the
decisions. Run: ``python bench/extender_floor.py --port P --kubeconfig FILE [--watch]``.
"""

from __future__ import annotations

import argparse
import sys
import threading
from contextlib import AbstractContextManager
from pathlib import Path

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.commands.extender import server_options
from scheduler.k8s.codec import decode_pod

_JSON = "application/json"


def build(lock: AbstractContextManager[object] | None) -> Starlette:
    """The floor app; with ``lock`` (the cache's), each request's pod is decoded under it."""

    async def body_of(request: Request) -> dict[str, object]:
        body = orjson.loads(await request.body())
        if lock is not None:
            with lock:
                decode_pod(body["Pod"])
        return dict(body)

    async def filter_(request: Request) -> Response:
        names = (await body_of(request))["NodeNames"]
        reply = {"Nodes": None, "NodeNames": names, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}}
        return Response(orjson.dumps({**reply, "Error": ""}), media_type=_JSON)

    async def prioritize(request: Request) -> Response:
        names = (await body_of(request))["NodeNames"]
        assert isinstance(names, list)
        return Response(orjson.dumps([{"Host": n, "Score": 5} for n in names]), media_type=_JSON)

    async def ok(_request: Request) -> Response:
        return Response(b"ok", media_type="text/plain")

    routes = [Route("/filter", filter_, methods=["POST"]), Route("/prioritize", prioritize, methods=["POST"])]
    routes += [Route("/healthz", ok), Route("/readyz", ok)]
    return Starlette(routes=routes)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--watch", action="store_true", help="run the extender's watch-fed cache too")
    args = ap.parse_args()
    lock: threading.RLock | None = None
    if args.watch:
        from scheduler.k8s.cache import ClusterCache
        from scheduler.k8s.connect import api_client
        from scheduler.k8s.listwatch import KubeListWatch

        cache = ClusterCache(KubeListWatch(api_client(args.kubeconfig), ""))
        cache.start()
        if not cache.wait_synced(120):
            sys.exit(f"cache not synced after 120 s: {cache.unsynced()}")
        lock = cache.lock
    uvicorn.run(build(lock), host=args.host, port=args.port, log_level="warning", **server_options())


if __name__ == "__main__":
    main()
