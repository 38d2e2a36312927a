"""Issue 14 without services: which commit errors are transient and which permanent, and
how the sink splits a batch refused permanently down to the window that causes it."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import (
    DataError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    ProgrammingError,
    StatementError,
)

from sharedstream.core.holds import NOTHING, Taken
from sharedstream.core.window import SUBMITTED, Window
from sharedstream.statestore import StateStore
from sharedstream.statestore.engine import is_permanent_error, is_transient_error
from sharedstream.triggerer.config import ProcessSettings
from sharedstream.uow.sink import DatabaseWorkSink
from sharedstream.uow.transaction import Queued


class DriverDataError(Exception):
    """Stands for a PEP 249 driver's DataError (e.g. psycopg.DataError) left unwrapped."""


DriverDataError.__name__ = "DataError"


def wrapped(cls: type[Exception], orig: Exception) -> Exception:
    return cls("INSERT ...", {}, orig)


@pytest.mark.parametrize("exc", [
    wrapped(OperationalError, sqlite3.OperationalError("database is locked")),
    wrapped(OperationalError, sqlite3.OperationalError("deadlock detected")),
    wrapped(InterfaceError, sqlite3.InterfaceError("connection already closed")),
    ConnectionResetError("reset by peer"),
    TimeoutError("timed out"),
])
def test_infrastructure_is_transient(exc: Exception) -> None:
    assert is_transient_error(exc) and not is_permanent_error(exc)


@pytest.mark.parametrize("exc", [
    wrapped(DataError, sqlite3.DataError("text fields cannot contain NUL (0x00) bytes")),
    wrapped(IntegrityError, sqlite3.IntegrityError("FOREIGN KEY constraint failed")),
    DriverDataError("PostgreSQL text fields cannot contain NUL (0x00) bytes"),
    ValueError("A string literal cannot contain NUL (0x00) characters."),
    StatementError("bind", "INSERT ...", {}, ValueError("bad bind value")),
])
def test_constraint_and_data_errors_are_permanent(exc: Exception) -> None:
    assert is_permanent_error(exc) and not is_transient_error(exc)


@pytest.mark.parametrize("exc", [
    wrapped(ProgrammingError, sqlite3.ProgrammingError("no such table: asset_event")),
    RuntimeError("a bug"),
])
def test_unknown_errors_are_neither_and_so_held(exc: Exception) -> None:
    """A missing table refuses every message alike: held, never dead-lettered."""
    assert not is_permanent_error(exc) and not is_transient_error(exc)


class Owner:
    def __init__(self) -> None:
        self.confirmed: list[int] = []
        self.rejected: dict[int, str] = {}

    def window_confirmed(self, window: Window) -> None:
        self.confirmed.append(window.payload)

    def window_failed(self, window: Window, exc: BaseException) -> None:
        raise AssertionError(f"failed {window!r}: {exc!r}")

    def window_rejected(self, window: Window, reason: str) -> None:
        self.rejected[window.payload] = reason


class ScriptedSink(DatabaseWorkSink):
    """Commits nothing; a part fails while it holds a poisoned window, and the first
    ``outages`` attempts fail with a transient error."""

    def __init__(self, store: StateStore, poisoned: set[int], outages: int = 0) -> None:
        super().__init__(store, {"w": 1}, ProcessSettings(uow_batch_size=16),
                         coordinates=lambda p: ("t", "tid", 0, p),
                         retry_initial=0.001, retry_cap=0.001)
        self.poisoned = poisoned
        self.outages = outages
        self.attempts: list[list[int]] = []

    def _write(self, batch: list[Queued], taken: Taken = NOTHING) -> int:
        offsets = [q.window.payload for q in batch]
        self.attempts.append(offsets)
        if self.outages:
            self.outages -= 1
            raise wrapped(OperationalError, sqlite3.OperationalError("database is locked"))
        bad = self.poisoned.intersection(offsets)
        if bad:
            raise wrapped(DataError, sqlite3.DataError(f"NUL in the key of offset {min(bad)}"))
        return len(batch)


async def run(sink: ScriptedSink, count: int) -> Owner:
    owner = Owner()
    windows = []
    for offset in range(count):
        window = Window(owner, None, "w", None, offset)
        window.state = SUBMITTED
        windows.append(window)
    sink.submit(windows)
    assert await sink.drain(5)
    await sink.aclose()
    return owner


@pytest.fixture
def store(tmp_path: Path) -> Any:
    store = StateStore.from_url(f"sqlite:///{tmp_path / 'db.sqlite'}")
    yield store
    store.close()


async def test_one_poisoned_window_is_rejected_and_the_rest_commit_in_order(
    store: StateStore,
) -> None:
    sink = ScriptedSink(store, poisoned={5}, outages=2)
    owner = await run(sink, 16)
    assert owner.confirmed == [o for o in range(16) if o != 5]  # in window order
    assert owner.rejected == {5: "the database refused the unit of work: "
                                 "DataError: NUL in the key of offset 5"}
    # Two transient failures retried the whole batch; then halves down to the window.
    assert sink.attempts[:3] == [list(range(16))] * 3
    assert [len(a) for a in sink.attempts[3:]] == [8, 4, 4, 2, 1, 1, 2, 8]
    figures = sink.figures
    assert figures.healthy and figures.failures == 2 and figures.windows_rejected == 1
    assert sink.figures.permanent_failures == 5 and sink.figures.windows_confirmed == 15


async def test_several_poisoned_windows_each_rejected(store: StateStore) -> None:
    sink = ScriptedSink(store, poisoned={0, 7, 8, 15})
    owner = await run(sink, 16)
    assert sorted(owner.rejected) == [0, 7, 8, 15]
    assert owner.confirmed == [o for o in range(16) if o not in (0, 7, 8, 15)]
    assert sink.figures.failures == 0 and sink.figures.events_written == 12


async def test_a_batch_without_poison_is_one_transaction(store: StateStore) -> None:
    sink = ScriptedSink(store, poisoned=set())
    owner = await run(sink, 16)
    assert owner.confirmed == list(range(16)) and sink.attempts == [list(range(16))]
    assert sink.figures.batches == 1 and sink.figures.permanent_failures == 0
