"""Fixtures of the state-store integration tests: every test gets its own database
(``db_url`` from ``tests/integration/conftest.py``), migrated by ``StateStore.upgrade()``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from statestore_helpers import FakeClock, MakeStore

from sharedstream.statestore import StateStore, StateStoreSettings


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2030, 1, 1, 12, 0, tzinfo=UTC))


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
