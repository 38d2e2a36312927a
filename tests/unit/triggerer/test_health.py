from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from sharedstream.triggerer.health import HealthServer


@pytest.fixture
def reasons() -> list[str]:
    return []


@pytest.fixture
def server(reasons: list[str]) -> Iterator[HealthServer]:
    registry = CollectorRegistry()
    Counter("sample_total", "A sample counter.", registry=registry).inc(3)
    srv = HealthServer(registry, lambda: reasons)
    srv.start()
    yield srv
    srv.stop()


def _get(srv: HealthServer, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{srv.port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_livez_always_ok(server: HealthServer, reasons: list[str]) -> None:
    reasons.append("broker unreachable")
    assert _get(server, "/livez") == (200, "ok\n")


def test_readyz_follows_check_and_names_reasons(server: HealthServer, reasons: list[str]) -> None:
    assert _get(server, "/readyz") == (200, "ready\n")
    reasons.extend(["database not answering", "group orders: cohort incomplete"])
    status, body = _get(server, "/readyz")
    assert status == 503
    assert "not ready: database not answering" in body
    assert "group orders: cohort incomplete" in body


def test_metrics_exposes_registry(server: HealthServer) -> None:
    status, body = _get(server, "/metrics")
    assert status == 200
    assert "sample_total 3.0" in body


def test_unknown_path_404(server: HealthServer) -> None:
    assert _get(server, "/nope")[0] == 404


def test_failing_check_reports_not_ready() -> None:
    def broken() -> list[str]:
        raise RuntimeError("boom")

    srv = HealthServer(CollectorRegistry(), broken)
    srv.start()
    try:
        status, body = _get(srv, "/readyz")
    finally:
        srv.stop()
    assert status == 503 and "readiness check failed: RuntimeError" in body
