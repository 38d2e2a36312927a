"""Fixtures of the Airflow bridge tests: two real Airflow 3 API servers, A and B.

Both declare the asset ``orders`` (same name and uri, as two instances of one
organisation would); only A declares ``only_in_a``, so the sink's "asset missing in
the target" path is real. The servers live for the session; tests tell their data
apart by the event ids they create.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from airflow_server import ONLY_IN_A, ORDERS, AirflowServer, ensure_airflow


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
