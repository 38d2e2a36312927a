"""End to end on the real broker and real PostgreSQL: KafkaSharedStreamProducer ->
SharedStreamManager -> watchers (one keeping a per-partition watermark in its asset
state) -> DatabaseWorkSink -> commits, with redeliveries: the watermark watcher raises once
on some messages after staging its watermark and yielding its event, so those messages
are handed to it again and must end with exactly one event and the watermark past them."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

from kafka_triggerer import running_group
from sqlalchemy import select
from test_kafka_shared_stream import produce

from sharedstream.core.message import KafkaMessage
from sharedstream.statestore import AssetScope, StateStore
from sharedstream.statestore.models import asset_event
from sharedstream.triggerer.config import ProcessSettings
from sharedstream.triggers.base import TriggerEvent
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger

MESSAGES = 2000
PARTITIONS = 3


class Keeper(KafkaSharedStreamTrigger):
    """Keeps every ``keep_every``-th offset; with ``watermark``, skips what its
    per-partition ``last_seen`` says it has seen and advances it with each event."""

    keep_every = 1
    watermark = False
    fail_once_every = 0  # raise once, after the event, on offsets divisible by this

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.handed: list[tuple[int, int]] = []
        self.failed: set[tuple[int, int]] = set()
        self.retried: set[tuple[int, int]] = set()  # handed with message.is_retry

    async def filter_shared_stream(self, stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            where = (message.partition, message.offset)
            self.handed.append(where)
            if message.is_retry:
                self.retried.add(where)
            if message.offset % self.keep_every:
                continue
            if self.watermark:
                key = f"last_seen/{message.partition}"
                last_seen = await self.asset_state_store.aget(key, default=-1)
                if message.offset <= last_seen and not message.catching_up:
                    continue  # the documented pattern: a retry is let through
                await self.asset_state_store.aadvance(key, message.offset)
            yield TriggerEvent({"partition": message.partition, "offset": message.offset})
            if (self.fail_once_every and message.offset % self.fail_once_every == 0
                    and where not in self.failed):
                # Inside the message's window: its staged watermark and event must go.
                self.failed.add(where)
                raise RuntimeError(f"planted failure at {where}")


async def test_kafka_manager_and_sink_commit_every_event_once_with_its_watermark(
    kafka_bootstrap: str, create_topic: Callable[..., str], postgres_store: StateStore
) -> None:
    topic = create_topic("uow", partitions=PARTITIONS)
    produce(kafka_bootstrap, topic, MESSAGES, partitions=PARTITIONS)
    store = postgres_store
    group_id = f"uow-{uuid.uuid4().hex[:8]}"
    triggers = {name: Keeper(topics=[topic], kafka_config_id="k") for name in ("all", "marks")}
    triggers["marks"].keep_every = 3
    triggers["marks"].watermark = True
    triggers["marks"].fail_once_every = 90
    async with running_group(kafka_bootstrap, store, group_id, triggers,
                             {"all": "all_orders", "marks": "marked_orders"},
                             process=ProcessSettings(uow_batch_size=200)) as running:
        def events() -> list[tuple[str, int, int, int]]:
            e = asset_event.c
            with store.engine.connect() as conn:
                return [tuple(r) for r in conn.execute(  # type: ignore[misc]
                    select(e.watcher, e.partition, e.offset, e.event_index))]

        found: list[tuple[str, int, int, int]] = []

        async def settled() -> bool:
            found[:] = await asyncio.to_thread(events)
            return sum(1 for f in found if f[0] == "all") == MESSAGES

        deadline = asyncio.get_running_loop().time() + 120
        while not await settled():
            assert asyncio.get_running_loop().time() < deadline, f"{len(found)} events"
            await asyncio.sleep(0.1)
        ends = [len(range(p, MESSAGES, PARTITIONS)) for p in range(PARTITIONS)]
        await running.until_committed(topic, ends,
                                      within=deadline - asyncio.get_running_loop().time())
        found[:] = await asyncio.to_thread(events)

    marks_watcher, all_watcher = triggers["marks"], triggers["all"]
    # The redeliveries happened, and only to the watcher that failed.
    assert marks_watcher.failed == {(p, o) for p in range(PARTITIONS)
                                    for o in range(0, ends[p], 90)}
    handed = Counter(marks_watcher.handed)
    assert {w for w, n in handed.items() if n > 1} == marks_watcher.failed
    assert set(handed.values()) == {1, 2} and set(Counter(all_watcher.handed).values()) == {1}
    # Every failed message came back marked as a retry. A message also comes marked when
    # it was held for a watcher whose queue was full (it lagged, under load), and then it
    # was never handed to it before: its first hand-out, after later messages.
    assert marks_watcher.failed <= marks_watcher.retried
    for watcher in (marks_watcher, all_watcher):
        lagged = watcher.retried - watcher.failed
        assert all(Counter(watcher.handed)[where] == 1 for where in lagged), watcher
    # A failed attempt's staged watermark would make the second attempt skip its message,
    # and its event would be a second row if the key did not refuse it: exactly one each.
    assert Counter(found).most_common(1)[0][1] == 1
    all_events = {(p, o) for w, p, o, _ in found if w == "all"}
    assert all_events == {(p, o) for p in range(PARTITIONS) for o in range(ends[p])}
    marks = {(p, o) for w, p, o, _ in found if w == "marks"}
    assert marks == {(p, o) for p in range(PARTITIONS) for o in range(0, ends[p], 3)}
    watermarks = store.asset(AssetScope(name="marked_orders"))
    for p in range(PARTITIONS):
        assert watermarks.get(f"last_seen/{p}") == max(o for q, o in marks if q == p)
    assert running.sink.figures.healthy and running.sink.figures.events_written == len(found)
