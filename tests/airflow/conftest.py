"""Fixtures of the Airflow bridge tests: two real Airflow 3 API servers, A and B.

Both declare the asset ``orders`` (same name and uri, as two instances of one
organisation would); only A declares ``only_in_a``, so the sink's "asset missing in
the target" path is real. The servers live for the session; tests tell their data
apart by the event ids they create.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow_server import ONLY_IN_A, ORDERS, AirflowServer, ensure_airflow

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "integration"))
sys.path.insert(0, str(TESTS / "e2e"))

from db_schemas import postgres_schema_url  # noqa: E402
from triggerer import Triggerers, connection_for  # noqa: E402


@pytest.fixture(scope="session")
def airflow_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, AirflowServer]]:
    try:
        airflow = ensure_airflow()
        root: Path = tmp_path_factory.mktemp("airflow")
        servers = {"a": AirflowServer(airflow, root / "a", [ORDERS, ONLY_IN_A]),
                   "b": AirflowServer(airflow, root / "b", [ORDERS])}
        for server in servers.values():
            server.start()
    except Exception as error:
        pytest.fail(f"a real Airflow API server is needed by these tests: {error}",
                    pytrace=False)
    try:
        yield servers
    finally:
        for server in servers.values():
            server.stop()


@pytest.fixture
def pg_url(database_url: str) -> Iterator[str]:
    """A fresh PostgreSQL schema per test, for the triggerer's own database."""
    yield from postgres_schema_url(database_url)


@pytest.fixture
def connection(kafka_bootstrap: str) -> dict[str, Any]:
    return connection_for(kafka_bootstrap, "airflow")


@pytest.fixture
def triggerers(tmp_path: Path) -> Iterator[Triggerers]:
    pool = Triggerers(tmp_path)
    yield pool
    pool.kill_all()
