"""A partition's first reads carry the topic id as soon as it is known.

The consumer thread keeps one class of first reads per partition and generation, with the
topic id on it. The ids are resolved before the first ``consume()``, but a topic the
resolver did not answer for then (created after the start, or a check that timed out) is
read with no id (``""``) until the topic watch learns it. Learning an id is not a change of
id (nothing restarts, the generation stays), so a class made before must not be kept: every
later record would carry ``""`` for the whole assignment, its events keyed without the
topic's incarnation (a recreated topic's events would collide with the old ones and be
dropped as duplicates).

A unit test of ``ConsumerThread._hand_over``'s logic, on records shaped as confluent-kafka's.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from sharedstream.kafka.consumer_thread import ConsumerThread


class Record:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return "orders"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_000)

    def key(self) -> None:
        return None

    def value(self) -> bytes:
        return b"{}"

    def headers(self) -> None:
        return None


def test_records_after_the_id_is_learnt_carry_it() -> None:
    posted: list[Any] = []
    thread: Any = SimpleNamespace(
        owned={("orders", 0): 1}, watch=SimpleNamespace(ids={}), read_as={},
        s=SimpleNamespace(replay_topic=None, topics=("orders",)),
        hand=SimpleNamespace(
            inbox=SimpleNamespace(post_batch=lambda batch, _size: posted.append(batch)),
            status=SimpleNamespace(ready=True)))
    ConsumerThread._hand_over(thread, [Record(0)])  # the watch has not answered yet
    thread.watch.ids["orders"] = "id-of-orders"
    ConsumerThread._hand_over(thread, [Record(1), Record(2)])
    ids = [(payload.offset, payload.topic_id) for batch in posted for _, payload in batch.items]
    assert ids == [(0, ""), (1, "id-of-orders"), (2, "id-of-orders")]
    assert [payload.origin.identity for _, payload in posted[1].items] == [
        "id-of-orders:0:1", "id-of-orders:0:2"]
