"""Routed watchers end to end (issue 42) on the real broker and real PostgreSQL: watchers
with a ``match`` share one consumer, each handed only what its match takes.

Six per-message watchers each want one key, one wants two keys through ``$or`` and a
prefix, and a batch watcher wants the values whose ``tier`` is ``gold`` (a field of the
JSON value), emitting an event per message and raising on one poison message every time.
Four keys are wanted by no watcher: their messages settle at once and are committed
past. Checked in the database and on the broker: each watcher's events are exactly the
messages its match takes, one row each; the poison is a ``rejected_message`` row for the
batch watcher alone; every partition is committed to its end. A second run of the same
group over more messages adds exactly the new messages' events: nothing lost, nothing
written twice.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kafka_triggerer import QUICK_RETRIES, running_group
from sqlalchemy import select

from kafka_writes import ordered_producer
from sharedstream import MessageBatch
from sharedstream.core.message import KafkaMessage
from sharedstream.statestore import AssetScope, StateStore
from sharedstream.statestore.models import asset_event, rejected_message
from sharedstream.triggers.base import TriggerEvent
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger

PARTITIONS = 3
KEYS = 12
POISON_N = 35  # gold (35 % 5 == 0): the batch watcher raises on it every time


def key_of(n: int) -> str:
    return f"k{n % KEYS}"


def value_of(n: int) -> dict[str, Any]:
    return {"n": n, "tier": "gold" if n % 5 == 0 else "basic"}


def produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    """Message ``n`` to partition ``n % PARTITIONS`` at offset ``n // PARTITIONS``: the
    expected rows are worked out from that (checked on every delivery report)."""
    landed: dict[int, tuple[int, int]] = {}
    p = ordered_producer(bootstrap)
    for n in range(first, first + count):
        p.produce(topic, json.dumps(value_of(n)).encode(), key=key_of(n).encode(),
                  partition=n % PARTITIONS,
                  on_delivery=lambda _e, m, n=n: landed.__setitem__(n, (m.partition(),
                                                                        m.offset())))
    assert p.flush(30) == 0
    assert landed == {n: (n % PARTITIONS, n // PARTITIONS) for n in range(first, first + count)}


class GoldBatch(KafkaSharedStreamTrigger):
    """A batch watcher on ``value.tier``: an event per message, a watermark per partition
    (a database read and write: a call started inline waits, and ends in its task); the
    poison raises."""

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        msg: KafkaMessage
        for msg in batch:
            if msg.json["n"] == POISON_N:
                raise ValueError("poison gold")
            await self.asset_state_store.aadvance(f"last/{msg.partition}", msg.json["n"])
            batch.emit(msg, TriggerEvent({"n": msg.json["n"]}))


def watchers(topic: str) -> dict[str, KafkaSharedStreamTrigger]:
    out: dict[str, KafkaSharedStreamTrigger] = {
        f"key{j}": KafkaSharedStreamTrigger(topics=[topic], kafka_config_id="k",
                                            match={"key": [f"k{j}"]}) for j in range(6)}
    out["either"] = KafkaSharedStreamTrigger(
        topics=[topic], kafka_config_id="k",
        match={"$or": [{"key": ["k6"]}, {"key": [{"prefix": "k7"}]}]})
    out["gold"] = GoldBatch(topics=[topic], kafka_config_id="k",
                            match={"value": {"tier": ["gold"]}})
    return out


def wanted(watcher: str, n: int) -> bool:
    if watcher.startswith("key"):
        return key_of(n) == f"k{watcher[3:]}"
    if watcher == "either":
        return key_of(n) in ("k6", "k7")
    return n % 5 == 0 and n != POISON_N


def ends(total: int) -> list[int]:
    return [len(range(p, total, PARTITIONS)) for p in range(PARTITIONS)]


async def test_routed_watchers_get_exactly_what_their_match_takes_across_a_restart(
    kafka_bootstrap: str, create_topic: Callable[..., str], postgres_store: StateStore
) -> None:
    topic = create_topic("routed", partitions=PARTITIONS)
    store = postgres_store
    group_id = f"routed-{uuid.uuid4().hex[:8]}"
    settings = replace(QUICK_RETRIES, max_attempts=2)
    first, more = 600, 300
    produce(kafka_bootstrap, topic, 0, first)
    async with running_group(kafka_bootstrap, store, group_id, watchers(topic),
                             settings=settings) as running:
        await running.until_committed(topic, ends(first), within=120)
        [status] = running.manager.status()
        assert status.counters.unrouted > 0  # keys k8..k11 that are not gold: nobody's
        assert status.matches["gold"] == {"value": {"tier": ["gold"]}}
    check(store, first)
    produce(kafka_bootstrap, topic, first, more)  # the same group again, more messages
    async with running_group(kafka_bootstrap, store, group_id, watchers(topic),
                             settings=settings) as running:
        await running.until_committed(topic, ends(first + more), within=120)
    check(store, first + more)


def check(store: StateStore, total: int) -> None:
    e, r = asset_event.c, rejected_message.c
    with store.engine.connect() as conn:
        events = [tuple(row) for row in conn.execute(select(e.watcher, e.partition, e.offset,
                                                            e.event_index))]
        rejections = [tuple(row) for row in conn.execute(
            select(r.watcher, r.partition, r.offset, r.reason))]
    where = {n: (n % PARTITIONS, n // PARTITIONS) for n in range(total)}
    expected = sorted((w, *where[n], 0) for w in watchers("t") for n in range(total)
                      if wanted(w, n))
    assert sorted(events) == expected  # each wanted message once, nobody's never
    [(watcher, partition, offset, reason)] = rejections
    assert (watcher, (partition, offset)) == ("gold", where[POISON_N])
    assert reason.startswith("max attempts: ValueError: poison gold")
    watermarks = store.asset(AssetScope(name="gold"))
    for p in range(PARTITIONS):
        assert watermarks.get(f"last/{p}") == max(n for n in range(total)
                                                  if n % PARTITIONS == p and wanted("gold", n))
