"""How ``perfsched extender`` serves the app: uvicorn's HTTP protocol writing each reply in one write."""

from __future__ import annotations

import asyncio
import http.client
import socket
import threading
import time
from typing import Any

import orjson
import uvicorn

from scheduler.commands.extender import CoalescingTransport, server_options
from scheduler.extender import create_app
from scheduler.settings import Settings
from tests.extender.conftest import FakeOracle
from tests.extender.kube import fed_cache, kube_node, kube_pod


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 9)}.get(name, default)


def test_writes_of_one_loop_turn_leave_as_one_write_and_close_sends_what_is_pending() -> None:
    async def run() -> RecordingTransport:
        raw = RecordingTransport()
        transport = CoalescingTransport(raw, asyncio.get_running_loop())
        transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
        transport.write(memoryview(b'{"a":1}'))
        assert raw.writes == []  # nothing leaves before the turn ends
        await asyncio.sleep(0)
        assert raw.writes == [b'HTTP/1.1 200 OK\r\n\r\n{"a":1}']
        transport.writelines([b"x", b"y"])
        transport.close()  # sends what is pending first
        assert raw.writes[1:] == [b"xy"] and raw.closed
        assert transport.get_extra_info("peername") == ("127.0.0.1", 9)  # the rest is the transport's
        await asyncio.sleep(0)
        return raw

    assert len(asyncio.run(run()).writes) == 2


def test_the_app_served_through_the_coalescing_protocol_answers_on_a_kept_alive_connection() -> None:
    cache = fed_cache([kube_node("a", "V100", 8), kube_node("b", "V100", 8)])
    app = create_app(Settings(), cache, FakeOracle())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    options = server_options()  # what ``perfsched extender`` serves with
    assert options["http"].__name__.startswith("Coalescing") and options["proxy_headers"] is False
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="off", **options)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        body = orjson.dumps({"Pod": kube_pod("p", 1), "Nodes": None, "NodeNames": ["a", "b", "ghost"]})
        for _ in range(2):  # two requests on one kept-alive connection
            conn.request("POST", "/filter", body=body, headers={"content-type": "application/json"})
            resp = conn.getresponse()
            reply = orjson.loads(resp.read())
            assert resp.status == 200
            assert reply["NodeNames"] == ["a", "b"] and list(reply["FailedNodes"]) == ["ghost"]
        conn.close()
    finally:
        server.should_exit = True
        thread.join(timeout=10)
