"""Fixtures of the e2e tests: a database per test, a connection per test, triggerer processes.

``db_url`` is the integration tests' per-test database (a SQLite file or a
fresh PostgreSQL schema; a fresh MariaDB database for a test that asks for it with
``@pytest.mark.parametrize("db_url", [...], indirect=True)``), imported from
``tests/integration`` rather than copied. ``triggerers`` starts processes through
:mod:`triggerer` and kills whatever still runs when the test ends, pass or fail.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from db_schemas import mariadb_database_url, postgres_schema_url
from triggerer import Triggerers, connection_for


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'state.db'}"
    elif request.param == "mariadb":
        yield from mariadb_database_url(request.getfixturevalue("mariadb_url"))
    else:
        yield from postgres_schema_url(request.getfixturevalue("database_url"))


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """For tests whose subject is not the database: SQLite only, fast."""
    return f"sqlite:///{tmp_path / 'state.db'}"


@pytest.fixture
def connection(kafka_bootstrap: str) -> dict[str, Any]:
    return connection_for(kafka_bootstrap, "e2e")


@pytest.fixture
def triggerers(tmp_path: Path) -> Iterator[Triggerers]:
    """Factory: ``triggerers(config, env={...})`` -> a not yet started Triggerer."""
    pool = Triggerers(tmp_path)
    yield pool
    pool.kill_all()
