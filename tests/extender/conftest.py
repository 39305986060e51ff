"""Fixtures for the extender tests: a fake throughput oracle and binder, and an app factory."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from fastapi.testclient import TestClient

from scheduler.core.errors import PermanentError
from scheduler.core.types import Job, PlacementShape
from scheduler.extender import create_app
from scheduler.k8s.cache import ClusterCache
from scheduler.settings import Settings

#: work units/s per GPU by type, for FakeOracle
SPEED = {"A100": 3.0, "H100": 5.0, "V100": 2.0, "T4": 1.0, "K80": 0.5}


class FakeOracle:
    """Throughput = per-GPU speed of the type x GPUs, x 0.8 when the gang spans several nodes.

    Records every batch it is asked (to check one call per request); ``fail`` makes it raise.
    """

    def __init__(self, speed: dict[str, float] | None = None) -> None:
        self.speed = speed or SPEED
        self.calls: list[list[tuple[Job, PlacementShape]]] = []
        self.fail = False

    def throughput(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]:
        self.calls.append(list(queries))
        if self.fail:
            raise RuntimeError("predictor exploded")
        return [
            self.speed.get(s.gpu_type, 0.0) * s.num_gpus * (0.8 if s.num_nodes > 1 else 1.0)
            for _, s in queries
        ]


class FakeBinder:
    """Records binds and placement records; ``errors`` maps pod name -> exception to raise."""

    def __init__(self) -> None:
        self.binds: list[tuple[str, str, str, str]] = []
        self.placements: list[tuple[str, str, dict[str, str]]] = []
        self.errors: dict[str, Exception] = {}
        self.record_error: Exception | None = None

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        if name in self.errors:
            raise self.errors[name]
        self.binds.append((namespace, name, uid, node))

    def record_placement(self, namespace: str, job_name: str, placement: dict[str, str]) -> None:
        if self.record_error is not None:
            raise self.record_error
        self.placements.append((namespace, job_name, placement))


class Gone(PermanentError):
    pass


@pytest.fixture
def oracle() -> FakeOracle:
    return FakeOracle()


@pytest.fixture
def binder() -> FakeBinder:
    return FakeBinder()


@pytest.fixture
def client_for(oracle: FakeOracle, binder: FakeBinder) -> Callable[..., TestClient]:
    def make(cache: ClusterCache, **settings: Any) -> TestClient:
        app = create_app(Settings(**settings), cache, oracle, binder=binder)
        return TestClient(app)

    return make
