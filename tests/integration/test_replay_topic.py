"""Replays are first-class (issue 25.2, 25.3), on the real broker and PostgreSQL.

* The README's watcher, taken from the README itself, handles a replay after a fix even
  though its watermark moved past the replayed messages.
* ``dlq replay`` writes to the group's replay topic (``<dlq topic>.replay``), which only
  the group's consumer reads: never into the original topic, unless asked for.
* A filter tells a replay from a first read and from a crash redelivery through the
  message's ``replay_count``, ``is_replay`` and ``read_at``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from kafka_triggerer import running_group
from readme_example import produce_avro_orders, registry_id, watcher_source
from sqlalchemy import select
from test_dlq_commands import (
    as_json,
    committed_sum,
    end_offsets,
    env,
    pg_url,
    read_all,
    until,
    write_dead_letters,
)

from kafka_writes import ordered_producer
from sharedstream.core.message import KafkaMessage
from sharedstream.kafka import dlq_headers as h
from sharedstream.serde.registries import configure_schema_registries
from sharedstream.statestore import StateStore
from sharedstream.statestore.models import asset_event
from sharedstream.triggerer.config import ProcessSettings
from sharedstream.triggers.base import TriggerEvent, reject_shared_stream_event
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger

__all__ = ["env", "pg_url"]  # fixtures, used by name

NO_AMOUNT = (2, 3, 5, 8, 11, 13, 17)  # order ids; 7 of 20
REJECTS = "if order.amount is None:"
BATCHES = ProcessSettings(uow_batch_size=50)


def readme_watcher(*, fixed: bool) -> tuple[type[KafkaSharedStreamTrigger], Any]:
    """``PaidOrders`` and the value deserialiser it is declared with, from the README's
    "A watcher" section, run as written; ``fixed`` deploys the fix (orders without an
    amount are no longer rejected)."""
    source = watcher_source()
    assert source.count(REJECTS) == 1, "the README's watcher no longer rejects this way"
    if fixed:
        source = source.replace(REJECTS, "if False:")
    namespace: dict[str, Any] = {}
    exec(compile(source, "README.md", "exec"), namespace)
    cls: type[KafkaSharedStreamTrigger] = namespace["PaidOrders"]
    return cls, namespace["order_values"]


def event_offsets(store: StateStore, watcher: str) -> list[tuple[str, int, int]]:
    e = asset_event.c
    with store.engine.connect() as conn:
        rows = conn.execute(select(e.topic, e.partition, e.offset)
                            .where(e.watcher == watcher)).all()
    return sorted((t, p, o) for t, p, o in rows)


@pytest.fixture
def replay_topics(kafka_admin: AdminClient) -> Iterator[list[str]]:
    """Replay topics a test makes the product create; deleted afterwards (best effort)."""
    made: list[str] = []
    yield made
    if made:
        kafka_admin.delete_topics(made, operation_timeout=10)


@pytest.fixture
def readme_registry(schema_registry: str) -> Iterator[None]:
    """The README's ``[schema_registries.<id>]``, pointed at the test registry."""
    configure_schema_registries({registry_id(): {"url": schema_registry}})
    yield
    configure_schema_registries({})


def produce_orders(bootstrap: str, registry_url: str, topic: str, ids: range) -> None:
    """The README's orders, framed Avro: the ids in ``NO_AMOUNT`` have no amount."""
    produce_avro_orders(bootstrap, registry_url, topic, [
        {"id": i, "status": "paid", **({} if i in NO_AMOUNT else {"amount": 10.0 + i})}
        for i in ids])


def produce_values(bootstrap: str, topic: str, *values: bytes) -> None:
    """In a helper, not a test: a test frame holding a client can end up in a cycle (a
    CLI result's traceback), which only the garbage collector would then free."""
    p = ordered_producer(bootstrap)
    for value in values:
        p.produce(topic, value, partition=0)
    assert p.flush(30) == 0


async def test_the_readme_watcher_creates_the_events_of_a_replay_after_its_fix(
    kafka_bootstrap: str, create_topic: Callable[..., str], pg_url: str, env: dict[str, str],
    replay_topics: list[str], schema_registry: str, readme_registry: None,
) -> None:
    """The issue's scenario: 7 orders rejected for a missing amount while later orders move
    the watermark past them; the watcher is fixed; ``dlq replay --reason`` through the
    CLI; the 7 events are created, at the original coordinates, each once."""
    source, dlq = create_topic("orders"), create_topic("orders-dlq")
    replay_topics.append(f"{dlq}.replay")
    produce_orders(kafka_bootstrap, schema_registry, source, range(1, 21))
    store = StateStore.from_url(pg_url)
    store.upgrade()
    group_id = f"replay-{uuid.uuid4().hex[:8]}"
    group = f"{group_id}.{source}"

    def trigger(fixed: bool) -> KafkaSharedStreamTrigger:
        cls, values = readme_watcher(fixed=fixed)
        return cls(topics=[source], kafka_config_id="k", dlq_topic=dlq,
                   value_deserializer=values)

    async with running_group(kafka_bootstrap, store, group_id, {"paid_orders": trigger(False)},
                             process=BATCHES):
        await until(lambda: committed_sum(kafka_bootstrap, group, source) == 20,
                    "first read committed")
    assert end_offsets(kafka_bootstrap, dlq) == [7]
    assert [o for _, _, o in event_offsets(store, "paid_orders")] == [
        i - 1 for i in range(1, 21) if i not in NO_AMOUNT]

    async with running_group(kafka_bootstrap, store, group_id, {"paid_orders": trigger(True)},
                             process=BATCHES):
        summary = await asyncio.to_thread(as_json, "dlq", "replay", dlq, "--reason",
                                          "missing amount")
        assert (summary["replayed"], summary["examined"]) == (7, 7)
        # Wherever the replay wrote, the group commits past all 7 replayed records.
        await until(lambda: committed_sum(kafka_bootstrap, group, source)
                    + committed_sum(kafka_bootstrap, group, f"{dlq}.replay") == 27,
                    "replays committed")
    events = event_offsets(store, "paid_orders")
    assert [o for _, _, o in events] == list(range(20))  # 7 more, each once
    assert {t for t, _, _ in events} == {source}  # keyed by their original coordinates
    assert end_offsets(kafka_bootstrap, dlq) == [7]  # none rejected again
    store.close()


def test_a_replay_goes_to_the_replay_topic_never_to_the_original_one(
    kafka_bootstrap: str, create_topic: Callable[..., str], env: dict[str, str],
    replay_topics: list[str], kafka_admin: AdminClient,
) -> None:
    """Other applications read the original topic: by default a replay is not there.

    The replay topic is created by ``dlq replay`` with the DLQ topic's partition count.
    """
    source, dlq = create_topic("orders"), create_topic("orders-dlq", partitions=2)
    replay = f"{dlq}.replay"
    replay_topics.append(replay)
    write_dead_letters(kafka_bootstrap, dlq, source, 3)
    summary = as_json("dlq", "replay", dlq)
    assert summary["replayed"] == 3

    produce_values(kafka_bootstrap, source, b"marker")
    on_source = read_all(kafka_bootstrap, source)  # to its log end, the marker included
    assert [(m.value(), m.headers()) for m in on_source] == [(b"marker", None)]

    meta = kafka_admin.list_topics(replay, timeout=10).topics[replay]
    assert meta.error is None and len(meta.partitions) == 2
    replayed = read_all(kafka_bootstrap, replay, 2)
    parsed = [h.parse_replay(m.headers()) for m in replayed]
    assert sorted((r.origin.topic, r.origin.offset, r.replay_count)
                  for r in parsed if r is not None) == [(source, i, 1) for i in range(3)]


def test_to_topic_original_still_writes_into_the_original_topic(
    kafka_bootstrap: str, create_topic: Callable[..., str], env: dict[str, str],
    kafka_admin: AdminClient,
) -> None:
    source, dlq = create_topic("orders"), create_topic("orders-dlq")
    write_dead_letters(kafka_bootstrap, dlq, source, 3)
    summary = as_json("dlq", "replay", dlq, "--to-topic", "ORIGINAL")
    assert summary["replayed"] == 3
    on_source = read_all(kafka_bootstrap, source)
    assert sorted(m.value() for m in on_source) == [b"v0", b"v1", b"v2"]
    assert all(dict(m.headers())[h.REPLAY_COUNT] == b"1" for m in on_source)
    # Nothing went to (or created) the replay topic.
    assert f"{dlq}.replay" not in kafka_admin.list_topics(timeout=10).topics


class Recorder(KafkaSharedStreamTrigger):
    """Writes down how each message was handed to it; rejects ``bad`` values until fixed,
    and raises once on the first ``crash`` value (a failure the manager redelivers)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fixed = False
        self.seen: list[tuple[Any, ...]] = []  # kept across the restart after the raise

    async def filter_shared_stream(self, stream: AsyncIterator[Any]
                                   ) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            self.seen.append((message.value, message.topic, message.partition, message.offset,
                              message.replay_count, message.is_replay, tuple(message.read_at)))
            if message.value == b"crash" and sum(s[0] == b"crash" for s in self.seen) == 1:
                raise RuntimeError("crash once")
            if message.value == b"bad" and not self.fixed:
                reject_shared_stream_event("bad")
                continue
            yield TriggerEvent(message.offset)


async def test_a_filter_tells_a_replay_from_a_first_read_and_a_redelivery(
    kafka_bootstrap: str, create_topic: Callable[..., str], pg_url: str, env: dict[str, str],
    replay_topics: list[str],
) -> None:
    source, dlq = create_topic("orders"), create_topic("orders-dlq")
    replay = f"{dlq}.replay"
    replay_topics.append(replay)
    produce_values(kafka_bootstrap, source, b"ok", b"bad", b"crash", b"ok")
    store = StateStore.from_url(pg_url)
    store.upgrade()
    group_id = f"replay-{uuid.uuid4().hex[:8]}"
    group = f"{group_id}.{source}"  # the consumer group: the replay topic is not in it

    first = Recorder(topics=[source], kafka_config_id="k", dlq_topic=dlq)
    async with running_group(kafka_bootstrap, store, group_id, {"recorder": first},
                             process=BATCHES):
        await until(lambda: committed_sum(kafka_bootstrap, group, source) == 4, "first read")
    # First reads, and the crash redelivery: count 0, read where they are.
    assert sorted(first.seen) == sorted([
        (b"ok", source, 0, 0, 0, False, (source, 0, 0)),
        (b"bad", source, 0, 1, 0, False, (source, 0, 1)),
        (b"crash", source, 0, 2, 0, False, (source, 0, 2)),
        (b"crash", source, 0, 2, 0, False, (source, 0, 2)),
        (b"ok", source, 0, 3, 0, False, (source, 0, 3)),
    ])

    again = Recorder(topics=[source], kafka_config_id="k", dlq_topic=dlq)
    again.fixed = True
    async with running_group(kafka_bootstrap, store, group_id, {"recorder": again},
                             process=BATCHES):
        summary = await asyncio.to_thread(as_json, "dlq", "replay", dlq)
        assert summary["replayed"] == 1
        await until(lambda: committed_sum(kafka_bootstrap, group, replay) == 1,
                    "the replay committed by the group")
    # The replay: its original coordinates, count 1, read on the replay topic.
    assert again.seen == [(b"bad", source, 0, 1, 1, True, (replay, 0, 0))]
    assert [o for _, _, o in event_offsets(store, "recorder")] == [0, 1, 2, 3]
    store.close()
