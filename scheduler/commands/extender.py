"""``perfsched extender``: run the scheduler extender webhook (uvicorn) for kube-scheduler.

CLI command module (I/O): reads settings from ``PERFSCHED_*``, the kubeconfig from ``--kubeconfig``,
``KUBECONFIG`` or the in-cluster service account, starts the watch-fed cache, loads the throughput
predictor, and serves ``scheduler.extender.create_app`` until interrupted. Heavy imports happen inside
the command so that ``perfsched --help`` stays fast.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:  # asyncio is imported where the server runs: the CLI's other commands skip it
    import asyncio

log = logging.getLogger(__name__)


class CoalescingTransport:
    """A transport whose writes made in one turn of the event loop leave in one write, after the turn.

    uvicorn writes a reply's status line and headers, then its body, each straight to the socket: two
    TCP segments, so kube-scheduler's reader wakes for the headers and again for the body while it waits
    on its serial scheduling path (and on a busy machine the extender may lose the CPU in between).
    Closing (or ``write_eof``) sends what is pending first; everything else is the wrapped transport's.
    """

    def __init__(self, transport: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        """Send what was written since the last flush, as one write."""
        if self._pending:
            data, self._pending = b"".join(self._pending), []
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def coalescing(protocol: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
    """``protocol`` (uvicorn's HTTP protocol class) writing through a ``CoalescingTransport``."""

    class Coalescing(protocol):  # type: ignore[valid-type,misc]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            # (uvloop's transports are not ``asyncio.Transport`` subclasses, but have its methods)
            import asyncio

            super().connection_made(CoalescingTransport(transport, asyncio.get_running_loop()))

    Coalescing.__name__ = Coalescing.__qualname__ = f"Coalescing{protocol.__name__}"
    return Coalescing


def server_options() -> dict[str, Any]:
    """uvicorn's options for the extender (also the latency benchmark's): kube-scheduler waits on every
    filter and prioritize call (docs/extender.md, Performance)."""
    from uvicorn.config import HTTP_PROTOCOLS
    from uvicorn.importer import import_from_string

    # libuv's event loop and the C HTTP parser (dependencies of perfsched); a venv built before they
    # were added still serves, on asyncio and h11
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    if (loop, http) != ("uvloop", "httptools"):
        log.warning("uvloop or httptools is not installed: serving on %s and %s (slower)", loop, http)
    return {
        "loop": loop,
        # one write per reply (headers and body together): kube-scheduler reads it in one wake-up
        "http": coalescing(import_from_string(HTTP_PROTOCOLS[http])),
        "access_log": False,
        # kube-scheduler calls the extender directly: no proxy headers to read on every request
        "proxy_headers": False,
    }


def register(app: typer.Typer) -> None:
    @app.command("extender")
    def extender(
        host: str = typer.Option(
            None, "--host", help="Address to listen on (default: $PERFSCHED_EXTENDER_HOST)."
        ),
        port: int = typer.Option(
            None, "--port", help="Port to listen on (default: $PERFSCHED_EXTENDER_PORT)."
        ),
        kubeconfig: str = typer.Option(
            None, "--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG, else in-cluster config)."
        ),
        sync_timeout: float = typer.Option(
            60.0, "--sync-timeout", help="Seconds to wait for the first list of nodes, pods and jobs."
        ),
    ) -> None:
        """Run the kube-scheduler extender: filter, prioritize and bind by predicted throughput."""
        import uvicorn

        from scheduler.core.errors import ConfigError
        from scheduler.extender import create_app
        from scheduler.k8s.binder import KubeBinder
        from scheduler.k8s.cache import ClusterCache
        from scheduler.k8s.connect import api_client
        from scheduler.k8s.listwatch import KubeListWatch
        from scheduler.settings import configure_logging, load_settings

        settings = load_settings()
        configure_logging(settings)
        tls: dict[str, str] = {}
        if settings.extender_tls_cert_file:
            for path in (settings.extender_tls_cert_file, settings.extender_tls_key_file):
                if not os.path.isfile(path):
                    raise ConfigError(f"PERFSCHED_EXTENDER_TLS_*_FILE: {path} does not exist")
            tls = {
                "ssl_certfile": settings.extender_tls_cert_file,
                "ssl_keyfile": settings.extender_tls_key_file,
            }
        api = api_client(kubeconfig)
        source = KubeListWatch(api, settings.namespace)
        cache = ClusterCache(
            source,
            assume_ttl_s=settings.extender_assume_ttl_seconds,
            hold_ttl_s=settings.extender_plan_hold_seconds,
            watch_timeout_s=settings.extender_watch_timeout_seconds,
        )
        from scheduler.oracles.predictor import PredictorOracle

        try:
            # the same predictor the operator's policies use, so both agree on what is fast
            oracle = PredictorOracle.load()
        except Exception as exc:
            raise ConfigError(f"cannot load the throughput predictor: {exc}") from None
        cache.start()
        if not cache.wait_synced(sync_timeout):
            log.warning(
                "cache not synced after %.0f s (still waiting for %s); /readyz stays 503 until it is",
                sync_timeout,
                ", ".join(cache.unsynced()),
            )
        app = create_app(settings, cache, oracle, binder=KubeBinder(api), reader=source)
        uvicorn.run(
            app,
            host=host or settings.extender_host,
            port=port or settings.extender_port,
            log_level=settings.log_level.lower(),
            **server_options(),
            **tls,  # type: ignore[arg-type]
        )
        cache.stop()
