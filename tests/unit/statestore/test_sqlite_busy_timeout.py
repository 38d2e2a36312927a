"""``[state_store] sqlite_busy_timeout``: how long a SQLite connection waits for a lock.

Read back from SQLite itself (``PRAGMA busy_timeout`` on the store's own connection),
not from the settings object: the option must reach every connection the engine opens.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from sharedstream.statestore.engine import is_transient_error
from sharedstream.statestore.store import StateStore
from sharedstream.triggerer.config import load_config


def busy_timeout_ms(store: StateStore) -> int:
    with store.engine.connect() as connection:
        return int(connection.execute(text("PRAGMA busy_timeout")).scalar_one())


def test_the_option_reaches_every_connection_and_defaults_to_30_s(tmp_path: Path) -> None:
    config_file = tmp_path / "sharedstream.toml"
    config_file.write_text("[state_store]\nsqlite_busy_timeout = 0.25\n")
    config = load_config(config_file, env={})
    url = f"sqlite:///{tmp_path / 'state.db'}"
    with StateStore.from_url(url, config.state_store) as store:
        assert busy_timeout_ms(store) == 250
    with StateStore.from_url(url) as store:
        assert busy_timeout_ms(store) == 30_000
    env = {"SHAREDSTREAM__STATE_STORE__SQLITE_BUSY_TIMEOUT": "2"}
    overridden = load_config(config_file, env=env)
    with StateStore.from_url(url, overridden.state_store) as store:
        assert busy_timeout_ms(store) == 2_000


def test_a_locked_file_fails_the_write_as_a_transient_error(tmp_path: Path) -> None:
    """Past the timeout the statement fails with "database is locked", which the unit of
    work holds and retries (a transient error), rather than waiting forever."""
    config_file = tmp_path / "sharedstream.toml"
    config_file.write_text("[state_store]\nsqlite_busy_timeout = 0\n")
    url = f"sqlite:///{tmp_path / 'state.db'}"
    with StateStore.from_url(url, load_config(config_file, env={}).state_store) as store:
        store.upgrade()
        with store.engine.connect() as holder:
            holder.execute(text("BEGIN EXCLUSIVE"))
            with pytest.raises(OperationalError, match="database is locked") as info:
                store.register_asset("orders")
            holder.rollback()
        assert is_transient_error(info.value)
        assert store.register_asset("orders") >= 1  # the lock gone, the same write passes
