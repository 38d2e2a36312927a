"""The schema check of ``run``, ``check`` and ``deliver`` reads the database's revision
without Alembic: the same answer as Alembic's on SQLite, PostgreSQL and MariaDB, and the
same start-up for a database that is empty, behind or ahead."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.runtime.migration import MigrationContext

from sharedstream.statestore import StateStore
from sharedstream.statestore.migrate import REVISIONS
from sharedstream.triggerer.config import Config, DatabaseSettings
from sharedstream.triggerer.plan import StartupError
from sharedstream.triggerer.startup import open_store


def both_reads(store: StateStore) -> tuple[str | None, str | None]:
    with store.engine.connect() as connection:
        by_alembic = MigrationContext.configure(connection).get_current_revision()
    return store.revision(), by_alembic


def test_the_revision_is_read_as_alembic_reads_it(db_url: str) -> None:
    with StateStore.from_url(db_url) as store:
        assert both_reads(store) == (None, None)  # no alembic_version table
        store.upgrade(REVISIONS[-2])
        assert both_reads(store) == (REVISIONS[-2], REVISIONS[-2])
        store.upgrade()
        assert both_reads(store) == (REVISIONS[-1], REVISIONS[-1])
        store.downgrade()
        assert both_reads(store) == (None, None)  # the table is there, empty


@pytest.fixture
def sqlite_config(tmp_path: Path) -> Config:
    return Config(database=DatabaseSettings(url=f"sqlite:///{tmp_path / 'state.db'}"))


def test_an_empty_database_is_migrated_to_the_head(sqlite_config: Config) -> None:
    with open_store(sqlite_config, upgrade=False) as store:
        assert store.revision() == REVISIONS[-1]


def test_a_database_behind_is_refused_unless_upgrade(sqlite_config: Config) -> None:
    with StateStore.from_url(sqlite_config.database.url) as store:
        store.upgrade(REVISIONS[-2])
    with pytest.raises(StartupError) as refused:
        open_store(sqlite_config, upgrade=False)
    assert str(refused.value) == (
        f"the database is at schema revision {REVISIONS[-2]}, this version needs "
        f"{REVISIONS[-1]}: run `sharedstream db upgrade` or start with --upgrade")
    with open_store(sqlite_config, upgrade=True) as store:
        assert store.revision() == REVISIONS[-1]


def test_a_database_ahead_is_refused_even_with_upgrade(sqlite_config: Config) -> None:
    with StateStore.from_url(sqlite_config.database.url) as store:
        store.upgrade()
        with store.engine.begin() as connection:
            connection.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
    for upgrade in (False, True):
        with pytest.raises(StartupError) as refused:
            open_store(sqlite_config, upgrade=upgrade)
        assert str(refused.value) == (
            f"the database is at schema revision 9999, unknown to this version (which "
            f"needs {REVISIONS[-1]}): it was migrated by a newer sharedstream; run that "
            "version, or restore a database at a known revision")
