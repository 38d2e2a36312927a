"""An ack timeout while a watcher waits on infrastructure (the database) counts no attempt.

The ack timeout does not fire during a wait bracketed by
``Window.waiting_on_infrastructure`` (what the watcher state access does around its
database reads), and the wait's length moves the message's deadline. ``max_attempts=1``
makes any counted failure an immediate rejection, so a rejection would show at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from manager_fakes import Harness, settle
from sqlalchemy.exc import OperationalError

from sharedstream.core.window import current_window
from sharedstream.statestore import StateStore
from sharedstream.triggerer import state_access
from sharedstream.triggerer.state_access import WatcherStateAccess


def refused() -> OperationalError:
    return OperationalError("SELECT ...", {}, ConnectionRefusedError("connection refused"))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    store = StateStore.from_url(f"sqlite:///{tmp_path / 'state.db'}")
    store.upgrade()
    yield store
    store.close()


async def fed_one(filter_fn: Any) -> Harness:
    """Watcher "a" (ack_timeout 5 s, one attempt) running ``filter_fn``, handed one message."""
    h = Harness(["a"], ack_timeout=5.0, max_attempts=1)
    h.sink.auto = True
    h.start("a", filter_fn)
    await settle()
    h.producer.feed(("p", 0))
    await settle()
    return h


async def outlast_ack_timeouts(h: Harness) -> None:
    """100 s on the manual clock: twenty ack timeouts, were the timer running."""
    for _ in range(20):
        h.clock.advance(5.0)
        await settle()


async def test_no_ack_timeout_while_waiting_on_infrastructure() -> None:
    back = asyncio.Event()

    async def read_through_outage(message: str) -> list[Any]:
        window = current_window()
        assert window is not None
        with window.waiting_on_infrastructure():
            await back.wait()
        return [message]

    h = await fed_one(read_through_outage)
    await outlast_ack_timeouts(h)
    assert h.resolved() == [] and h.triggers["a"].starts == 1
    back.set()
    await settle()
    outcome = h.outcome(("p", 0))
    assert outcome.acked == {"a"} and outcome.is_clean
    await h.stop()


async def test_the_wait_moves_the_deadline_and_the_watchers_own_time_still_counts() -> None:
    steps = {name: asyncio.Event() for name in ("work_done", "back")}

    async def work_wait_hang(message: str) -> list[Any]:
        await steps["work_done"].wait()  # the watcher's own time
        window = current_window()
        assert window is not None
        with window.waiting_on_infrastructure():
            await steps["back"].wait()
        await asyncio.Event().wait()  # then it hangs: its own fault
        return []

    h = Harness(["a"], ack_timeout=30.0, max_attempts=1)
    h.start("a", work_wait_hang)
    await settle()
    h.producer.feed(("p", 0))
    await settle()
    h.clock.advance(20.0)
    steps["work_done"].set()
    await settle()
    h.clock.advance(100.0)  # waiting on the database: not counted
    steps["back"].set()
    await settle()
    h.clock.advance(9.999)  # 29.999 s of its own time
    await settle()
    assert h.resolved() == []
    h.clock.advance(0.001)
    await settle()
    assert h.outcome(("p", 0)).rejected == {"a": "max attempts: ack timeout after 30.0s"}
    h.clock.advance(1.0)  # the cancelled filter's restart backoff
    await settle()
    await h.stop()


async def test_a_state_read_retrying_through_an_outage_holds_the_message(
        store: StateStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_access, "READ_RETRY_INITIAL", 0.0)
    asset_id = store.register_asset("entities")
    state = WatcherStateAccess(store, "a", "entities", asset_id)
    back = asyncio.Event()
    calls: list[str] = []

    async def database(fn: Any, *args: Any) -> Any:
        calls.append(args[1])
        if len(calls) <= 3:
            raise refused()  # three refused reads, retried ...
        await back.wait()  # ... then one hanging until the server is back
        return fn(*args)

    monkeypatch.setattr(store, "run_async", database)

    async def watermark(message: str) -> list[Any]:
        key = f"watermark/{message}"
        if await state.aget(key, default=0) >= 1:
            return []
        await state.aadvance(key, 1)
        return [message]

    h = await fed_one(watermark)
    assert calls == ["watermark/p:0"] * 4 and state.read_failure is not None
    await outlast_ack_timeouts(h)
    assert h.resolved() == [] and h.triggers["a"].starts == 1
    back.set()
    await settle()
    assert h.outcome(("p", 0)).acked == {"a"} and state.read_failure is None
    assert len(calls) == 4  # the advance read the value the read had just fetched
    await h.stop()


async def test_a_sync_state_read_failing_in_a_window_counts_no_attempt(
        store: StateStore, monkeypatch: pytest.MonkeyPatch) -> None:
    asset_id = store.register_asset("entities")
    state = WatcherStateAccess(store, "a", "entities", asset_id)
    outage = {"on": True}
    real_get = store.backend.asset_get

    def asset_get(*args: Any) -> Any:
        if outage["on"]:
            raise refused()
        return real_get(*args)

    monkeypatch.setattr(store.backend, "asset_get", asset_get)

    async def sync_read(message: str) -> list[Any]:
        return [] if state.get(f"watermark/{message}") else [message]

    h = Harness(["a"], max_attempts=1, retry_backoff_initial=1.0)
    h.sink.auto = True
    h.start("a", sync_read)
    await settle()
    h.producer.feed(("p", 0))
    await settle()
    outcome = h.outcome(("p", 0))
    assert outcome.failed == {"a"} and not outcome.rejected  # held, not dead-lettered
    outage["on"] = False
    h.clock.advance(1.0)  # the filter restarts, and the held message comes again
    await settle()
    assert h.outcome(("p", 0)).acked == {"a"}
    await h.stop()


async def test_a_wait_still_open_for_an_earlier_message_does_not_hide_the_open_ones() -> None:
    """A task the filter started for one message may read state for it after the filter
    moved on. Its wait holds nothing (Window.waiting_on_infrastructure), and it must not
    push the open message's own wait out of the count either: that message would then be
    timed out while it waits on the database, and dead-lettered (max_attempts=1)."""
    stale_go, stale_back, back = asyncio.Event(), asyncio.Event(), asyncio.Event()
    started: list[asyncio.Task[None]] = []

    async def late_read(window: Any) -> None:
        await stale_go.wait()
        with window.waiting_on_infrastructure():
            await stale_back.wait()

    async def reads(message: str) -> list[Any]:
        window = current_window()
        assert window is not None
        if message == "p:0":  # reads for p:0 later, in a task of its own
            started.append(asyncio.create_task(late_read(window)))
            return []
        with window.waiting_on_infrastructure():
            await back.wait()
        return [message]

    h = Harness(["a"], ack_timeout=5.0, max_attempts=1)
    h.sink.auto = True
    h.start("a", reads)
    await settle()
    h.producer.feed(("p", 0), ("p", 1))
    await settle()
    stale_go.set()  # p:1 waits on the database; now p:0's late read waits too
    await settle()
    await outlast_ack_timeouts(h)
    assert h.resolved() == [("p", 0)] and h.triggers["a"].starts == 1
    back.set()
    await settle()
    assert h.outcome(("p", 1)).acked == {"a"}
    stale_back.set()
    await asyncio.gather(*started)
    await h.stop()
