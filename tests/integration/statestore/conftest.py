"""Fixtures of the state-store integration tests: every test gets its own database.

SQLite: a file in the test's tmp dir. PostgreSQL: a fresh schema in the session's
throwaway database (``search_path`` set through the URL, so subprocesses get it too),
dropped afterwards. Both start empty and are migrated by ``StateStore.upgrade()``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from sharedstream.statestore import StateStore, StateStoreSettings


@dataclass
class FakeClock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


def postgres_schema_url(base_url: str) -> Iterator[str]:
    schema = f"ss_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(base_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    try:
        url = make_url(base_url).update_query_dict({"options": f"-csearch_path={schema}"})
        yield url.render_as_string(hide_password=False)
    finally:
        with engine.connect() as connection:
            connection.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'state.db'}"
    else:
        yield from postgres_schema_url(request.getfixturevalue("database_url"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2030, 1, 1, 12, 0, tzinfo=UTC))


MakeStore = Callable[..., StateStore]


@pytest.fixture
def make_store(db_url: str, clock: FakeClock) -> Iterator[MakeStore]:
    stores: list[StateStore] = []

    def make(**settings: Any) -> StateStore:
        store = StateStore.from_url(db_url, StateStoreSettings(**settings), clock=clock)
        if not stores:
            store.upgrade()
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


@pytest.fixture
def store(make_store: MakeStore) -> StateStore:
    return make_store()
