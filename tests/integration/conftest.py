"""Fixtures shared by the integration tests.

``db_url``: every test gets its own empty database, parametrised over SQLite (a file in
the test's tmp dir) and PostgreSQL (a fresh schema in the session's throwaway database,
``search_path`` set through the URL so subprocesses get it too, dropped afterwards).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from db_schemas import postgres_schema_url


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'state.db'}"
    else:
        yield from postgres_schema_url(request.getfixturevalue("database_url"))
