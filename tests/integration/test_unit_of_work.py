"""The unit of work on SQLite and real PostgreSQL: events and staged state in one
transaction, retries, idempotent redelivery, read-your-writes, poison payloads, and the
rejection recorder."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.engine import Engine
from uow_windows import WindowDriver, coordinates

from sharedstream.core.message import Coordinates
from sharedstream.kafka.rejections import RejectedMessage
from sharedstream.statestore import AssetScope, StateStore
from sharedstream.statestore.models import asset_event, asset_state_store, rejected_message
from sharedstream.triggerer.config import ProcessSettings
from sharedstream.triggerer.state_access import READ_CACHE_SECONDS, WatcherStateAccess
from sharedstream.triggers.assets import Asset
from sharedstream.uow.rejections import DatabaseRejectionRecorder
from sharedstream.uow.sink import DatabaseWorkSink

TOPIC = "orders"


async def until(condition: Callable[[], bool], within: float = 15.0, what: str = "") -> None:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: {what or condition}")
        await asyncio.sleep(0.01)


@pytest.fixture
def store(db_url: str) -> Iterator[StateStore]:
    store = StateStore.from_url(db_url)
    store.upgrade()
    yield store
    store.close()


class Setup:
    def __init__(self, store: StateStore, **process: Any) -> None:
        self.store = store
        self.asset_id = store.register_asset("orders", "kafka://orders")
        process.setdefault("uow_max_delay", 0.01)
        self.sink = DatabaseWorkSink(store, {"w": self.asset_id, "v": self.asset_id},
                                     ProcessSettings(**process), coordinates=coordinates,
                                     retry_initial=0.01, retry_cap=0.05)
        self.state = WatcherStateAccess(store, "w", "orders", self.asset_id)
        self.w = WindowDriver("w", self.sink)

    def events(self) -> list[tuple[str, int, int, int, Any]]:
        """(watcher, partition, offset, index, decoded payload) of every stored event."""
        e = asset_event.c
        with self.store.engine.connect() as conn:
            rows = conn.execute(select(e.watcher, e.partition, e.offset, e.event_index,
                                       e.payload).order_by(e.watcher, e.offset, e.event_index))
            return [(w, p, o, i, json.loads(text)) for w, p, o, i, text in rows]

    def committed_state(self, key: str) -> Any:
        return self.store.asset(AssetScope(name="orders")).get(key)


async def test_events_and_staged_state_commit_together_then_confirm(store: StateStore) -> None:
    s = Setup(store)
    for offset in range(3):
        s.w.open((TOPIC, 0, offset))
        assert await s.state.aadvance("last_seen/0", offset)
        s.w.emit({"n": offset}, f"second-{offset}")
        s.w.close()
    await until(lambda: len(s.w.confirmed) == 3)
    assert s.events() == [("w", 0, o, i, p) for o in range(3)
                          for i, p in enumerate([{"n": o}, f"second-{o}"])]
    assert s.committed_state("last_seen/0") == 2
    assert (s.sink.figures.events_written, s.sink.figures.windows_confirmed) == (6, 3)
    assert s.sink.figures.healthy and s.sink.figures.last_error is None
    await s.sink.aclose()


async def test_state_only_and_event_only_windows(store: StateStore) -> None:
    s = Setup(store)
    s.w.open((TOPIC, 0, 0))
    await s.state.aset("cursor", {"a": [1, 2]})
    s.w.close()
    s.w.open((TOPIC, 0, 1))
    s.w.close()  # nothing to persist: never reaches the sink
    s.w.handle((TOPIC, 0, 2), "e")
    await until(lambda: len(s.w.confirmed) == 2)
    assert s.w.confirmed == [(TOPIC, 0, 0), (TOPIC, 0, 2)]
    assert s.committed_state("cursor") == {"a": [1, 2]}
    await s.sink.aclose()


class FailingStatements:
    """A real DB-level fault: raise on statements touching ``table`` while armed."""

    def __init__(self, engine: Engine, table: str) -> None:
        self.table = table
        self.armed = True
        self.raised = 0
        self.engine = engine
        event.listen(engine, "before_cursor_execute", self._check)

    def _check(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if self.armed and self.table in statement and not statement.lstrip().upper().startswith(
                "SELECT"):
            self.raised += 1
            raise RuntimeError(f"injected failure #{self.raised} on {self.table}")

    def remove(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self._check)


@pytest.mark.parametrize("failing", ["asset_state_store", "asset_event"])
async def test_a_batch_failing_mid_transaction_leaves_nothing_and_is_retried(
        store: StateStore, failing: str) -> None:
    """A batch's state writes run first and its events insert last, in one transaction.

    ``asset_state_store`` failing: the first statement fails, nothing was written.
    ``asset_event`` failing: the state writes have already run in the transaction and must
    roll back with it; a watermark committed on its own before the events (ahead of its
    events after a crash) fails here.
    """
    s = Setup(store)
    fault = FailingStatements(store.engine, failing)
    for offset in range(2):
        s.w.open((TOPIC, 1, offset))
        await s.state.aadvance("last_seen/1", offset)
        s.w.emit(offset)
        s.w.close()
    await until(lambda: fault.raised >= 3, what="three failed attempts")
    assert not s.sink.figures.healthy and "injected failure" in (s.sink.figures.last_error or "")
    assert s.w.confirmed == [] and s.w.failed == []
    assert s.events() == [] and s.committed_state("last_seen/1") is None
    fault.armed = False
    await until(lambda: len(s.w.confirmed) == 2)
    fault.remove()
    assert [row[:3] for row in s.events()] == [("w", 1, 0), ("w", 1, 1)]
    assert s.committed_state("last_seen/1") == 1
    figures = s.sink.figures
    assert figures.healthy and figures.last_error is None and figures.failures >= 3
    await s.sink.aclose()


async def test_a_redelivered_message_creates_no_second_event(store: StateStore) -> None:
    s = Setup(store)
    s.w.handle((TOPIC, 0, 7), "a", "b")
    await until(lambda: len(s.w.confirmed) == 1)
    s.w.handle((TOPIC, 0, 7), "a", "b")  # the same message again (e.g. crash before commit)
    await until(lambda: len(s.w.confirmed) == 2)
    assert [row[:4] for row in s.events()] == [("w", 0, 7, 0), ("w", 0, 7, 1)]
    assert s.sink.figures.events_written == 2
    await s.sink.aclose()


async def test_the_last_drain_leaves_nothing_to_persist_after_it(store: StateStore) -> None:
    """At SIGTERM the sink is drained a last time, then each group commits its offsets
    from what was confirmed. A window submitted while that drain waits (here: in the
    turn after the first one's commit, before the drain's task resumes) is committed and
    confirmed before the drain returns; one submitted after it is never persisted. Else
    its events would sit above the final offset commit: after a clean stop the e2e
    pipeline test found 8 such messages handled twice."""
    s = Setup(store)
    loop = asyncio.get_running_loop()

    def next_window() -> None:
        s.w.open((TOPIC, 0, 1))
        s.w.emit("e1")
        s.w.close()

    s.sink.on_commit.append(lambda: loop.call_soon(next_window) if len(s.w.confirmed) == 1
                            else None)
    s.w.handle((TOPIC, 0, 0), "e0")
    assert await s.sink.drain(10, last=True)
    assert s.w.confirmed == [(TOPIC, 0, 0), (TOPIC, 0, 1)]
    s.w.handle((TOPIC, 0, 2), "e2")  # after the last drain: redelivered after the restart
    await s.sink.aclose()
    assert s.w.confirmed == [(TOPIC, 0, 0), (TOPIC, 0, 1)]
    assert [(offset, payload) for _, _, offset, _, payload in s.events()] == [
        (0, "e0"), (1, "e1")]


async def test_reads_see_this_window_then_pending_windows_then_the_database(
        store: StateStore) -> None:
    s = Setup(store, uow_max_delay=30.0)  # nothing commits until drained
    store.asset(AssetScope(name="orders")).set("other", "committed")
    s.w.open((TOPIC, 0, 0))
    assert await s.state.aadvance("wm", 10)
    assert s.state.get("wm") == 10 and await s.state.aget("wm") == 10
    s.w.emit("e0")
    s.w.close()
    s.w.open((TOPIC, 0, 1))
    assert await s.state.aget("wm") == 10  # message 0's advance, not yet committed
    assert not await s.state.aadvance("wm", 9)
    assert s.state.advance("wm", 11)
    s.w.close()
    s.w.open((TOPIC, 0, 2))
    assert await s.state.aget("wm") == 11
    assert await s.state.adelete("wm") is True
    assert await s.state.aget("wm", "gone") == "gone"
    assert await s.state.aget("other") == "committed"  # from the database
    s.w.close()
    assert s.committed_state("wm") is None and s.w.confirmed == []
    assert await s.sink.drain(10)
    assert s.w.confirmed == [(TOPIC, 0, 0), (TOPIC, 0, 1), (TOPIC, 0, 2)]
    assert s.committed_state("wm") is None
    assert s.sink.figures.batches == 1  # three windows, one transaction
    await s.sink.aclose()


async def test_what_this_watcher_committed_or_read_is_known_for_a_while(
        store: StateStore) -> None:
    """A watermark read per message must not cost a database round trip each time the
    window that last wrote it has committed; other writers are seen after
    READ_CACHE_SECONDS."""
    s = Setup(store)
    now = [0.0]
    state = WatcherStateAccess(store, "w", "orders", s.asset_id, clock=lambda: now[0])
    reads: list[str] = []
    real_get = store.backend.asset_get

    def counting_get(scope: AssetScope, key: str) -> Any:
        reads.append(key)
        return real_get(scope, key)

    store.backend.asset_get = counting_get  # type: ignore[method-assign]
    for offset in range(3):
        s.w.open((TOPIC, 0, offset))
        assert await state.aget("wm", -1) == offset - 1
        assert await state.aadvance("wm", offset)
        s.w.emit(offset)
        s.w.close()
        await until(lambda n=offset + 1: len(s.w.confirmed) == n)
    assert reads == ["wm"]  # the first read only: later ones know the committed value
    store.asset(AssetScope(name="orders")).set("wm", 50)  # an operator moves it
    s.w.open((TOPIC, 0, 3))
    assert await state.aget("wm") == 2  # not seen yet ...
    now[0] += READ_CACHE_SECONDS
    assert await state.aget("wm") == 50  # ... but within READ_CACHE_SECONDS
    assert not await state.aadvance("wm", 3)
    s.w.close()
    assert reads == ["wm", "wm"]
    await state.aset("wm", 7)  # outside a window: written through, known at once
    assert await state.aget("wm") == 7 and reads == ["wm", "wm", "wm"]
    s.w.open((TOPIC, 0, 4))
    await state.aset("seen", {"ids": [1]})
    s.w.emit("e")
    s.w.close()
    await until(lambda: len(s.w.confirmed) == 4)
    s.w.open((TOPIC, 0, 5))
    known = await state.aget("seen")
    known["ids"].append(2)  # the caller's copy, not what the next read sees
    assert await state.aget("seen") == {"ids": [1]} and "seen" not in reads
    s.w.close()
    await s.sink.aclose()


async def test_failed_and_rejected_windows_stop_being_visible(store: StateStore) -> None:
    s = Setup(store, uow_max_delay=30.0)
    store.asset(AssetScope(name="orders")).set("wm", 1)
    s.w.open((TOPIC, 0, 0))
    await s.state.aadvance("wm", 5)
    failed = s.w.close(submit=False)  # held by "the sink", not committed
    s.w.open((TOPIC, 0, 1))
    assert await s.state.aget("wm") == 5
    failed.fail(ConnectionError("gave up"))
    assert await s.state.aget("wm") == 1  # the message is redelivered; its write is gone
    s.w.reject("bad")
    await s.state.aset("wm", 99)  # after the reject: dropped with the message
    assert await s.state.aget("wm") == 1
    assert s.w.window is not None and not s.w.window.staged
    await s.sink.aclose()


async def test_an_unserialisable_payload_rejects_only_its_window(store: StateStore) -> None:
    s = Setup(store)
    v = WindowDriver("v", s.sink)
    s.w.open((TOPIC, 0, 0))
    await s.state.aadvance("wm", 0)
    s.w.emit({"ok": True}, {"when": object()})
    bad = s.w.close(submit=False)
    good = v.handle((TOPIC, 0, 0), "fine")
    v.window = None
    s.sink.submit([bad])
    await until(lambda: v.confirmed == [(TOPIC, 0, 0)])
    reason = s.w.rejected[(TOPIC, 0, 0)]
    assert reason.startswith("event payload not JSON: ") and "object" in reason
    assert bad.rejected == reason and good.rejected is None
    assert s.events() == [("v", 0, 0, 0, "fine")]
    assert s.committed_state("wm") is None
    assert s.sink.figures.windows_rejected == 1
    await s.sink.aclose()


async def test_outside_a_window_writes_go_through_at_once(store: StateStore) -> None:
    s = Setup(store)
    assert s.state.advance("wm", 3)
    await s.state.aset("k", [1])
    assert s.committed_state("wm") == 3 and s.committed_state("k") == [1]
    assert await s.state.adelete("k") and not s.state.delete("k")
    await s.state.aclear()
    assert s.committed_state("wm") is None
    assert s.state[Asset("orders")] is s.state and s.state["orders"] is s.state
    with pytest.raises(KeyError, match="'payments'"):
        s.state["payments"]
    await s.sink.aclose()


def _rejected(offset: int, value: bytes | None, **watchers: str) -> RejectedMessage:
    return RejectedMessage(
        origin=Coordinates(TOPIC, f"id-{TOPIC}", 0, offset, 0), consumer_group="g",
        rejections=watchers,
        error="no dead-letter topic configured", key=None, value=value)


async def test_rejection_recorder_rows_are_idempotent_and_binary_safe(store: StateStore) -> None:
    recorder = DatabaseRejectionRecorder(store)
    batch = [_rejected(1, b"\xff\xfe" + b"x" * 400, w="bad bytes", v="also"),
             _rejected(2, None, w="tombstone")]
    await recorder.record(batch)
    await recorder.record(batch)  # recorded again after a crash before the Kafka commit
    r = rejected_message.c
    with store.engine.connect() as conn:
        rows = conn.execute(select(r.watcher, r.offset, r.reason, r.value_preview)
                            .order_by(r.offset, r.watcher)).all()
        count = conn.execute(select(func.count()).select_from(rejected_message)).scalar_one()
    assert count == 3 and recorder.rows_written == 3
    assert [(row.watcher, row.offset) for row in rows] == [("v", 1), ("w", 1), ("w", 2)]
    assert rows[1].reason == "bad bytes (not dead-lettered: no dead-letter topic configured)"
    assert rows[1].value_preview is not None
    assert rows[1].value_preview.startswith("\ufffd\ufffdx") and len(rows[1].value_preview) == 256
    assert rows[2].value_preview is None


async def test_state_rows_record_the_watcher_as_writer(store: StateStore) -> None:
    s = Setup(store)
    s.w.open((TOPIC, 0, 0))
    await s.state.aset("k", 1)
    s.w.close()
    await until(lambda: len(s.w.confirmed) == 1)
    st = asset_state_store.c
    with store.engine.connect() as conn:
        row = conn.execute(select(st.writer_kind, st.writer_id)).one()
    assert tuple(row) == ("watcher", "w")
    await s.sink.aclose()
