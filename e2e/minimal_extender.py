"""A minimal kube-scheduler extender for the control-plane harness tests (not perfsched's extender).

It proves the wiring, not any policy: ``filter`` keeps every node it is given (``nodeCacheCapable``, so
node names only), ``prioritize`` gives 10 to the ``--prefer`` node and 0 to the others, ``bind`` creates
the Binding through the API (as an extender with ``bindVerb`` must), ``preempt`` agrees with the
scheduler's victims. Every call is recorded and served at ``GET /calls``.

Run: ``python e2e/minimal_extender.py --port P --kubeconfig K [--prefer NODE]``.
"""

from __future__ import annotations

import argparse
import threading
from typing import Any

import uvicorn
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


def _pod_ref(pod: dict[str, Any] | None) -> str:
    meta = (pod or {}).get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def create_app(api: k8s.ApiClient, prefer: str) -> Starlette:
    calls: list[dict[str, Any]] = []
    lock = threading.Lock()
    core = k8s.CoreV1Api(api)

    def record(verb: str, pod: str, **extra: Any) -> None:
        with lock:
            calls.append({"verb": verb, "pod": pod, **extra})

    async def filter_(request: Request) -> JSONResponse:
        args = await request.json()
        names = args.get("NodeNames") or []
        record("filter", _pod_ref(args.get("Pod")), nodes=names)
        return JSONResponse(
            {
                "Nodes": None,
                "NodeNames": names,
                "FailedNodes": {},
                "FailedAndUnresolvableNodes": {},
                "Error": "",
            }
        )

    async def prioritize(request: Request) -> JSONResponse:
        args = await request.json()
        names = args.get("NodeNames") or []
        record("prioritize", _pod_ref(args.get("Pod")), nodes=names)
        return JSONResponse([{"Host": n, "Score": 10 if n == prefer else 0} for n in names])

    async def bind(request: Request) -> JSONResponse:
        args = await request.json()
        ns, name, node = args["PodNamespace"], args["PodName"], args["Node"]
        record("bind", f"{ns}/{name}", node=node)
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "uid": args.get("PodUID")},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            # _preload_content=False: the client cannot parse the reply (kubernetes-client/python#825)
            core.create_namespaced_pod_binding(name, ns, body, _preload_content=False)
        except k8s.ApiException as exc:
            return JSONResponse({"Error": f"binding {ns}/{name} to {node}: {exc.status} {exc.reason}"})
        return JSONResponse({"Error": ""})

    async def preempt(request: Request) -> JSONResponse:
        args = await request.json()
        victims = args.get("NodeNameToMetaVictims") or {}
        record("preempt", _pod_ref(args.get("Pod")), nodes=sorted(victims))
        return JSONResponse({"NodeNameToMetaVictims": victims})

    async def get_calls(request: Request) -> JSONResponse:
        with lock:
            return JSONResponse(list(calls))

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/filter", filter_, methods=["POST"]),
            Route("/prioritize", prioritize, methods=["POST"]),
            Route("/bind", bind, methods=["POST"]),
            Route("/preempt", preempt, methods=["POST"]),
            Route("/calls", get_calls, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--prefer", default="")
    args = parser.parse_args()
    api = k8s_config.new_client_from_config(config_file=args.kubeconfig)
    uvicorn.run(create_app(api, args.prefer), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
