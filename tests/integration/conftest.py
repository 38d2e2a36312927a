"""Fixtures shared by the integration tests.

``db_url``: every test gets its own empty database, parametrised over SQLite (a file in
the test's tmp dir), PostgreSQL (a fresh schema in the session's throwaway database,
``search_path`` set through the URL so subprocesses get it too, dropped afterwards) and
MariaDB (a fresh database on the session's server, dropped afterwards): the unit of work,
cursor advances and event inserts run their MySQL branches on a real server.

``server_store``: an upgraded store on PostgreSQL or MariaDB only, for tests that hold a
row lock from another connection or kill one (SQLite has one writer and no such lock).
``postgres_store``: the same on PostgreSQL alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from db_schemas import mariadb_database_url, postgres_schema_url

from sharedstream.statestore import StateStore


@pytest.fixture(params=["sqlite", "postgresql", "mariadb"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'state.db'}"
    elif request.param == "postgresql":
        yield from postgres_schema_url(request.getfixturevalue("database_url"))
    else:
        yield from mariadb_database_url(request.getfixturevalue("mariadb_url"))


@pytest.fixture(params=["postgresql", "mariadb"])
def server_store(request: pytest.FixtureRequest) -> Iterator[StateStore]:
    urls = (postgres_schema_url(request.getfixturevalue("database_url"))
            if request.param == "postgresql"
            else mariadb_database_url(request.getfixturevalue("mariadb_url")))
    for url in urls:
        store = StateStore.from_url(url)
        store.upgrade()
        yield store
        store.close()


@pytest.fixture
def postgres_store(database_url: str) -> Iterator[StateStore]:
    for url in postgres_schema_url(database_url):
        store = StateStore.from_url(url)
        store.upgrade()
        yield store
        store.close()
