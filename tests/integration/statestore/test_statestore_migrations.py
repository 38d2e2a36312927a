"""Migrations upgrade and downgrade on SQLite, PostgreSQL and MariaDB, matching the models."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from db_schemas import postgres_schema_url

from sharedstream.statestore import StateStore
from sharedstream.statestore.migrate import head_revision
from sharedstream.statestore.models import metadata

TABLES = {"asset", "asset_state_store", "task_state_store", "asset_event",
          "rejected_message", "stream_group"}


@pytest.fixture(params=["sqlite", "postgresql", "mariadb"])
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'm.db'}"
    elif request.param == "postgresql":
        yield from postgres_schema_url(request.getfixturevalue("database_url"))
    else:
        yield request.getfixturevalue("mariadb_url")


def _tables(store: StateStore) -> set[str]:
    return set(sa.inspect(store.engine).get_table_names()) & TABLES


def test_upgrade_downgrade_upgrade(any_url: str) -> None:
    store = StateStore.from_url(any_url)
    start = store.revision()
    try:
        store.upgrade()
        assert store.revision() == head_revision()
        assert _tables(store) == TABLES
        with store.engine.connect() as connection:
            drift = compare_metadata(MigrationContext.configure(connection), metadata)
        assert drift == []
        store.downgrade()
        assert store.revision() is None
        assert _tables(store) == set()
        store.upgrade()
        store.upgrade()  # idempotent at head
        assert _tables(store) == TABLES
    finally:
        if start is None:
            store.downgrade()
        store.close()
