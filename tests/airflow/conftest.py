"""Fixtures of the Airflow bridge tests: two real Airflow 3 API servers, A and B.

Both declare the asset ``orders`` (same name and uri, as two instances of one
organisation would); only A declares ``only_in_a``, so the sink's "asset missing in
the target" path is real. The servers live for the session; tests tell their data
apart by the event ids they create.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from airflow_server import ONLY_IN_A, ORDERS, AirflowServer, ensure_airflow

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "integration"))
sys.path.insert(0, str(TESTS / "e2e"))

from db_schemas import postgres_schema_url  # noqa: E402
from triggerer import Triggerers, connection_for  # noqa: E402


def _started(airflow: Path, home: Path, assets: list[tuple[str, str]]) -> AirflowServer:
    server = AirflowServer(airflow, home, assets)
    try:
        server.start()
    except BaseException:
        server.stop()  # a server that never became healthy may still be running
        raise
    return server


@pytest.fixture(scope="session")
def airflow_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, AirflowServer]]:
    """A and B are made side by side: each is three ``airflow`` processes in a row
    (``db migrate``, ``dags reserialize``, the API server until healthy), most of the
    suite's Airflow set-up, and neither needs the other; so are their shutdowns.
    Whichever started is stopped when the other failed."""
    root: Path = tmp_path_factory.mktemp("airflow")
    assets = {"a": [ORDERS, ONLY_IN_A], "b": [ORDERS]}
    servers: dict[str, AirflowServer] = {}
    try:
        airflow = ensure_airflow()
        with ThreadPoolExecutor(len(assets)) as pool:
            made = {name: pool.submit(_started, airflow, root / name, wanted)
                    for name, wanted in assets.items()}
        servers = {name: future.result() for name, future in made.items()
                   if future.exception() is None}
        errors = [e for future in made.values() if (e := future.exception()) is not None]
        if errors:
            raise errors[0]
    except Exception as error:
        for server in servers.values():
            server.stop()
        pytest.fail(f"a real Airflow API server is needed by these tests: {error}",
                    pytrace=False)
    try:
        yield servers
    finally:
        with ThreadPoolExecutor(len(servers)) as pool:  # each waits for its shutdown
            list(pool.map(AirflowServer.stop, servers.values()))


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
