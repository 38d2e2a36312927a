"""The deliverer's rules, on a real SQLite database and a scripted destination.

A destination's answers are scripted per event id; the rest is the product: the
cursor table, the lease, the undelivered table, the commit-ordered events.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from sharedstream.delivery import cursor, undelivered
from sharedstream.delivery.cursor import cursors
from sharedstream.delivery.deliverer import Deliverer
from sharedstream.delivery.errors import (
    DeliveryError,
    PermanentDeliveryError,
    TransientDeliveryError,
)
from sharedstream.delivery.settings import CommonOptions, DestinationSettings, WebhookDestination
from sharedstream.statestore.events import EventRecord, insert_events
from sharedstream.statestore.models import delivery_cursor
from sharedstream.statestore.store import StateStore
from sharedstream.statestore.types import utcnow

Script = Callable[[EventRecord, int], DeliveryError | None]  # (event, attempt) -> answer


class ScriptedDestination:
    """Answers each event as ``script`` says; records every attempt in order."""

    def __init__(self, script: Script | None = None) -> None:
        self.script = script or (lambda _e, _n: None)
        self.attempts: list[tuple[int, bool]] = []  # (event id, maybe_sent)
        self.taken: list[int] = []
        self.seen: dict[int, int] = {}

    async def send(self, events: Sequence[EventRecord], *, maybe_sent: bool
                   ) -> list[DeliveryError | None]:
        results: list[DeliveryError | None] = []
        for event in events:
            self.attempts.append((event.id, maybe_sent))
            n = self.seen[event.id] = self.seen.get(event.id, 0) + 1
            answer = self.script(event, n)
            results.append(answer)
            if answer is None:
                self.taken.append(event.id)
            if isinstance(answer, TransientDeliveryError):
                break
        return results

    async def aclose(self) -> None:
        pass


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    store = StateStore.from_url(f"sqlite:///{tmp_path / 'state.db'}")
    store.upgrade()
    return store


def add_events(store: StateStore, asset: str, count: int, first_offset: int = 0) -> list[int]:
    asset_id = store.register_asset(asset)
    rows: list[dict[str, Any]] = [
        {"asset_id": asset_id, "watcher": f"w_{asset}", "payload": f'{{"n": {i}}}',
         "topic": "orders", "topic_id": "tid", "partition": 0, "offset": first_offset + i,
         "event_index": 0, "created_at": utcnow()} for i in range(count)]
    with store.engine.begin() as connection:
        insert_events(connection, rows)
    return [row["id"] for row in rows]


async def until(condition: Callable[[], bool]) -> None:
    """Until ``condition()`` (database rows written from the deliverer's thread: there is
    no event to await); fail after 10 s."""
    async with asyncio.timeout(10):
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


def destination(**common: Any) -> DestinationSettings:
    options = {"kind": "webhook", "start": "earliest", "retry_initial": 0.001,
               "retry_max": 0.002, **common}
    return DestinationSettings("d", CommonOptions(**options),
                               WebhookDestination(url="http://unused", secret="s"))


async def deliver_until(store: StateStore, dest: DestinationSettings,
                        sender: ScriptedDestination, done: Callable[[], bool],
                        owner: str = "me") -> Deliverer:
    """Run a deliverer until ``done()``; fail after 10 s."""
    stop = asyncio.Event()
    executor = ThreadPoolExecutor(1)
    deliverer = Deliverer(dest, sender, store.engine, executor, asyncio.Event(), owner=owner)
    task = asyncio.create_task(deliverer.run(stop))
    try:
        await until(done)
    finally:
        stop.set()
        await task
        executor.shutdown()
    return deliverer


def stored_cursor(store: StateStore) -> int:
    with store.engine.connect() as connection:
        return int(connection.execute(select(delivery_cursor.c.last_id)).scalar_one())


async def test_events_go_in_commit_order_and_the_cursor_follows(store: StateStore) -> None:
    ids = add_events(store, "orders", 5) + add_events(store, "payments", 3, 100)
    sender = ScriptedDestination()
    await deliver_until(store, destination(), sender, lambda: len(sender.taken) == 8)
    assert sender.taken == ids
    assert stored_cursor(store) == ids[-1]


async def test_unwanted_assets_are_passed_over_not_sent(store: StateStore) -> None:
    orders = add_events(store, "orders", 3)
    payments = add_events(store, "payments", 2, 100)
    sender = ScriptedDestination()
    deliverer = await deliver_until(store, destination(assets=["ord*"]), sender,
                                    lambda: stored_cursor_or_0(store) == payments[-1])
    assert sender.taken == orders
    assert deliverer.state.delivered == 3


def stored_cursor_or_0(store: StateStore) -> int:
    return cursors(store.engine).get("d", 0)


async def test_a_permanent_refusal_is_recorded_and_passed(store: StateStore) -> None:
    ids = add_events(store, "orders", 4)
    sender = ScriptedDestination(lambda e, _n: PermanentDeliveryError("no such asset", "x")
                                 if e.id == ids[1] else None)
    await deliver_until(store, destination(), sender, lambda: stored_cursor_or_0(store) == ids[-1])
    assert sender.taken == [ids[0], ids[2], ids[3]]
    [row] = undelivered.listed(store.engine)
    assert (row.destination, row.event.id, row.reason, row.attempts) == (
        "d", ids[1], "no such asset", 1)


async def test_a_transient_failure_holds_the_cursor_and_retries_as_maybe_sent(
        store: StateStore) -> None:
    ids = add_events(store, "orders", 3)
    held: list[int] = []

    def script(event: EventRecord, attempt: int) -> DeliveryError | None:
        if event.id == ids[1] and attempt < 3:
            held.append(stored_cursor(store))
            return TransientDeliveryError("down", "http_503")
        return None

    sender = ScriptedDestination(script)
    deliverer = await deliver_until(store, destination(), sender,
                                    lambda: len(sender.taken) == 3)
    assert sender.taken == ids
    assert len(held) == 2 and max(held) < ids[1]  # it never passed the failing event
    assert stored_cursor(store) == ids[-1]
    # A destination created by this process cannot have been sent anything yet; a retry
    # may repeat a send whose answer was lost: it goes as "maybe sent", for the kind to
    # check, and the event after it, never sent, does not.
    assert [a for a in sender.attempts if a[0] == ids[1]] == [
        (ids[1], False), (ids[1], True), (ids[1], True)]
    assert [a for a in sender.attempts if a[0] == ids[2]] == [(ids[2], False)]
    assert deliverer.state.failures == {"http_503": 2}
    assert undelivered.listed(store.engine) == []


async def test_after_a_takeover_only_the_first_batch_goes_as_maybe_sent(
        store: StateStore) -> None:
    """A predecessor (its lease expired) sent at most one batch past its stored cursor."""
    cursor.claim(store.engine, "d", start_at_end=False, now=utcnow() - timedelta(hours=1),
                 lease=timedelta(seconds=1), owner="gone")
    ids = add_events(store, "orders", 5)
    sender = ScriptedDestination()
    await deliver_until(store, destination(batch_size=2), sender,
                        lambda: len(sender.taken) == 5)
    assert sender.attempts == [(ids[0], True), (ids[1], True)] + [
        (i, False) for i in ids[2:]]


async def test_one_process_delivers_a_destination_the_other_stands_by(
        store: StateStore) -> None:
    ids = add_events(store, "orders", 3)
    first, second = ScriptedDestination(), ScriptedDestination()
    stop = asyncio.Event()
    executor = ThreadPoolExecutor(2)
    a = Deliverer(destination(), first, store.engine, executor, asyncio.Event(), owner="a")
    b = Deliverer(destination(), second, store.engine, executor, asyncio.Event(), owner="b")
    tasks = [asyncio.create_task(a.run(stop))]
    await until(lambda: len(first.taken) >= 3)
    tasks.append(asyncio.create_task(b.run(stop)))
    more = add_events(store, "orders", 2, 50)
    await until(lambda: len(first.taken) >= 5)
    assert second.attempts == [] and b.state.holder is False
    # a stops cleanly: it gives the lease up, and b carries on from the stored cursor.
    stop.set()
    await asyncio.gather(*tasks)
    stop2 = asyncio.Event()
    last = add_events(store, "orders", 1, 90)
    task = asyncio.create_task(b.run(stop2))
    await until(lambda: second.taken == last)
    stop2.set()
    await task
    executor.shutdown()
    assert first.taken == ids + more


async def test_a_new_destination_starts_at_the_newest_event_by_default(
        store: StateStore) -> None:
    add_events(store, "orders", 3)
    sender = ScriptedDestination()
    dest = destination(start="latest")
    executor = ThreadPoolExecutor(1)
    stop = asyncio.Event()
    deliverer = Deliverer(dest, sender, store.engine, executor, asyncio.Event(), owner="me")
    task = asyncio.create_task(deliverer.run(stop))
    await until(lambda: deliverer.state.cursor is not None)
    later = add_events(store, "orders", 2, 10)
    await until(lambda: len(sender.taken) >= 2)
    stop.set()
    await task
    executor.shutdown()
    assert sender.taken == later
