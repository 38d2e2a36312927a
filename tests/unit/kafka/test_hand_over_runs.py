"""The consumer thread hands a batch over as runs of one partition's first reads.

A run holds one partition's reads in rising offsets with their bytes summed as the
adapter's ``size`` weighs each; another partition, an offset not rising (a re-fetch)
or a replayed dead letter (not its own payload: a pair of its own) ends a run.
Client records are stand-ins: ``_hand_over`` reads only their accessors.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from sharedstream.core.contract import Records
from sharedstream.core.message import Coordinates
from sharedstream.core.reads import PartitionRun, ReadBatch
from sharedstream.kafka.consumer import KafkaSharedConsumer
from sharedstream.kafka.consumer_thread import ConsumerThread
from sharedstream.kafka.dlq_headers import build_dlq_headers, replay_headers
from sharedstream.kafka.handoff import HandOff
from sharedstream.kafka.payload import FirstRead, ReplayPayload

pytestmark = pytest.mark.unit


class ClientRecord:
    """What ``_hand_over`` reads of a ``confluent_kafka.Message``."""

    def __init__(self, topic: str, partition: int, offset: int, value: bytes | None,
                 key: bytes | None = None, headers: list[Any] | None = None) -> None:
        self._fields = (topic, partition, offset, value, key, headers)

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return str(self._fields[0])

    def partition(self) -> int:
        return int(self._fields[1])

    def offset(self) -> int:
        return int(self._fields[2])

    def value(self) -> Any:
        return self._fields[3]

    def key(self) -> Any:
        return self._fields[4]

    def headers(self) -> Any:
        return self._fields[5]

    def timestamp(self) -> tuple[int, int]:
        return (1, 1700)


def thread() -> Any:
    """A thread object with only what the hand-over reads (as bench/handoff.py makes it)."""
    made: Any = ConsumerThread.__new__(ConsumerThread)
    made.owned = {("t", 0): 1, ("t", 1): 1, ("t.replay", 0): 1}
    made.watch = SimpleNamespace(ids={"t": "id", "t.replay": "rid"})
    made.s = SimpleNamespace(replay_topic="t.replay", topics=("t",))
    made.read_as = {}
    made.hand = HandOff()
    return made


def replayed(offset: int) -> ClientRecord:
    dlq = build_dlq_headers(original_headers=[], origin=Coordinates("t", "id", 0, 3, 1700),
                            consumer_group="g", rejections={"w": "bad"}, replay_count=0)
    return ClientRecord("t.replay", 0, offset, b"v", headers=replay_headers(dlq))


def test_runs_end_at_another_partition_a_falling_offset_and_a_replay() -> None:
    consumer = thread()
    consumer._hand_over([
        ClientRecord("t", 0, 0, b"abc"), ClientRecord("t", 0, 1, None, key=b"k"),
        ClientRecord("t", 1, 5, b"x", headers=[("user", b"1")]),
        ClientRecord("t", 1, 4, b"yy"),  # not rising: a new run
        replayed(0), ClientRecord("t.replay", 0, 1, b"zzzz"), ClientRecord("t", 9, 0, b"x"),
    ])
    event = asyncio.run(consumer.hand.inbox.next_event())
    assert isinstance(event, Records)
    batch = event.items
    assert isinstance(batch, ReadBatch) and len(batch) == 6  # t[9] is not owned
    shapes = [("pair", type(p[1]).__name__) if isinstance(p, tuple) else
              (p.key, p.generation, [r.offset for r in p.reads], p.last, p.size)
              for p in batch.parts]
    assert shapes == [(("t", 0), 1, [0, 1], 1, 4), (("t", 1), 1, [5], 5, 1),
                      (("t", 1), 1, [4], 4, 2), ("pair", ReplayPayload.__name__),
                      (("t.replay", 0), 1, [1], 1, 4)]
    size = KafkaSharedConsumer.size.__get__(object.__new__(KafkaSharedConsumer))
    for part in batch.parts:
        if isinstance(part, PartitionRun):
            assert part.size == sum(size(read) for read in part.reads)
            assert all(isinstance(read, FirstRead) for read in part.reads)
    raw, payload = batch[4]
    assert raw is payload.message and payload.targets == frozenset({"w"})
    assert [raw is payload for raw, payload in batch] == [True, True, True, True, False, True]
