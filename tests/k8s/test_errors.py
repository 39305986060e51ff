"""``scheduler.k8s.errors``: every failure of the Kubernetes client becomes a perfsched error, and
``ApiHealth`` logs an outage once and counts its seconds."""

from __future__ import annotations

import http.client
import json
import logging

import orjson
import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError, ReadTimeoutError

from scheduler.core.errors import PermanentError, TemporaryError
from scheduler.k8s.errors import (
    AlreadyExists,
    ApiHealth,
    ApiUnavailable,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    OtherApiError,
    Throttled,
    api_call,
    translate,
)


def _api_exc(status: int, reason: str = "") -> ApiException:
    exc = ApiException(status=status, reason="x")
    exc.body = json.dumps({"kind": "Status", "reason": reason, "message": f"server says {status}"})
    return exc


@pytest.mark.parametrize(
    ("status", "reason", "kind", "temporary"),
    [
        (404, "NotFound", NotFound, False),
        (409, "AlreadyExists", AlreadyExists, False),
        (409, "Conflict", Conflict, True),
        (400, "BadRequest", Invalid, False),
        (422, "Invalid", Invalid, False),
        (401, "Unauthorized", Forbidden, False),
        (403, "Forbidden", Forbidden, False),
        (410, "Expired", Gone, True),
        (429, "TooManyRequests", Throttled, True),
        (500, "InternalError", ApiUnavailable, True),
        (503, "ServiceUnavailable", ApiUnavailable, True),
        (504, "Timeout", ApiUnavailable, True),
        (405, "MethodNotAllowed", OtherApiError, False),
    ],
)
def test_api_exceptions_map_by_status(status: int, reason: str, kind: type, temporary: bool) -> None:
    err = translate(_api_exc(status, reason), "list pods")
    assert type(err) is kind
    assert isinstance(err, TemporaryError if temporary else PermanentError)
    assert str(err).startswith("list pods: ") and f"server says {status}" in str(err)
    assert err.status == status  # type: ignore[union-attr]


def _pool_error(exc: Exception) -> MaxRetryError:
    return MaxRetryError(None, "/api/v1/pods", exc)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "exc",
    [
        _pool_error(NewConnectionError(None, "Failed to establish a new connection: [Errno 111] refused")),  # type: ignore[arg-type]
        NewConnectionError(None, "refused"),  # type: ignore[arg-type]
        ProtocolError("Connection aborted.", ConnectionResetError(104, "reset by peer")),
        ReadTimeoutError(None, "/api/v1/pods", "Read timed out. (read timeout=10)"),  # type: ignore[arg-type]
        ConnectionRefusedError(111, "Connection refused"),
        ConnectionResetError(104, "Connection reset by peer"),
        TimeoutError("timed out"),
        http.client.RemoteDisconnected("Remote end closed connection without response"),
        http.client.IncompleteRead(b"partial"),
        orjson.JSONDecodeError("unexpected end of data", '{"items": [', 11),
    ],
    ids=lambda e: type(e).__name__,
)
def test_every_transport_failure_is_api_unavailable(exc: Exception) -> None:
    err = translate(exc, "watch pods")
    assert isinstance(err, ApiUnavailable) and isinstance(err, TemporaryError)
    assert err.status == 0
    assert str(err).startswith("watch pods: API server unreachable (")
    with pytest.raises(ApiUnavailable) as info, api_call("watch pods"):
        raise exc
    assert info.value.__cause__ is exc


def test_programming_errors_pass_through_unchanged() -> None:
    assert translate(KeyError("x"), "op") is None
    with pytest.raises(KeyError), api_call("op"):
        raise KeyError("x")
    with pytest.raises(ValueError, match="plain"), api_call("op"):
        raise ValueError("plain")


def test_long_messages_and_call_names_are_cut() -> None:
    err = translate(ConnectionResetError("x" * 10_000), "op")
    assert err is not None and len(str(err)) < 400
    # a 10 MB pod name echoed back by the server stays out of the logs
    huge = _api_exc(422, "Invalid")
    huge.body = json.dumps({"reason": "Invalid", "message": "name: " + "p" * 10_000_000})
    err = translate(huge, "binding ns/" + "p" * 10_000_000)
    assert err is not None and len(str(err)) < 1500 and "(10000011 characters)" in str(err)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_health_logs_an_outage_once_and_counts_its_seconds(caplog: pytest.LogCaptureFixture) -> None:
    clock, counted = Clock(), []
    health = ApiHealth("emulator", clock=clock, count=counted.append)
    caplog.set_level(logging.INFO, logger="scheduler.k8s.errors")
    health.ok()
    assert health.available() and health.unavailable_seconds() == 0.0
    down = ApiUnavailable("list pods: API server unreachable (refused)")
    for _ in range(30):  # 30 failed calls, one a second
        assert health.failed(down)
        clock.t += 1.0
    assert not health.available() and health.outage_seconds() == 30.0
    health.tick()
    assert sum(counted) == 30.0
    clock.t += 2.0
    health.ok()
    assert health.available() and health.unavailable_seconds() == 32.0 and sum(counted) == 32.0
    messages = [r.getMessage() for r in caplog.records]
    assert sum("API server unavailable" in m for m in messages) == 1
    assert sum("available again after 32.0 s" in m for m in messages) == 1
    # an answer that is an error (404) is not an outage: the server is there
    assert not health.failed(NotFound("pod gone"))
    assert health.available() and health.outages == 1


def test_an_answer_to_a_call_made_before_the_outage_does_not_end_it() -> None:
    # a round lists the cluster at t=10, the API server goes away at t=11 (a watch fails), and the round
    # reports its success at t=12: that answer predates the outage, which goes on
    clock = Clock()
    health = ApiHealth("operator", clock=clock, count=lambda _s: None)
    clock.t = 10.0
    began = health.now()
    clock.t = 11.0
    health.failed(ApiUnavailable("watch: refused"))
    clock.t = 12.0
    health.ok(since=began)
    assert not health.available() and health.outages == 1
    health.ok(since=health.now())  # a call made during the outage that was answered ends it
    assert health.available()


def test_health_exports_the_metric() -> None:
    from scheduler import metrics

    clock = Clock()
    health = ApiHealth("test-component", clock=clock)
    health.failed(ApiUnavailable("x"))
    clock.t += 5.0
    health.ok()
    value = metrics.REGISTRY.get_sample_value(
        "perfsched_api_unavailable_seconds_total", {"component": "test-component"}
    )
    assert value == 5.0
