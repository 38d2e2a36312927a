"""How a filter tells a replay from a first read (issue 25.2): the message's attributes,
filled from the record the consumer read (``build_payload``, on the in-memory records)."""

from __future__ import annotations

from sharedstream.core.message import Coordinates, KafkaMessage, ReadPosition
from sharedstream.kafka import dlq_headers as h
from sharedstream.kafka.memory import MemoryRecord
from sharedstream.kafka.payload import build_payload

ORIGIN = Coordinates("orders", "TID", 1, 41, 1_700_000_000_000)


def replayed(count: int = 1) -> list[tuple[str, bytes | None]]:
    dead = h.build_dlq_headers(original_headers=[("trace", b"t")], origin=ORIGIN,
                               consumer_group="g.orders", rejections={"picky": "no amount"},
                               replay_count=count - 1)
    return h.replay_headers(dead)


def test_a_message_built_as_before_is_a_first_read_read_where_it_is() -> None:
    message = KafkaMessage("orders", 2, 7, 1, None, b"v")
    assert (message.replay_count, message.is_replay) == (0, False)
    assert message.read_at == ReadPosition("orders", 2, 7)
    assert (message.delivery, message.is_retry, message.catching_up) == (1, False, False)
    assert message == ("orders", 2, 7, 1, None, b"v", (), 0, None, 1)
    assert message._replace(delivery=2).catching_up


def test_a_replay_read_on_the_replay_topic_keeps_its_origin_and_says_where_it_was_read(
) -> None:
    record = MemoryRecord("orders.dlq.replay", 0, 3, b"v", b"k", tuple(replayed(2)))
    payload = build_payload(record, "orders.dlq.replay", 0, 3, "RID", 5, ("orders",))
    m = payload.message
    assert (m.topic, m.partition, m.offset, m.timestamp) == ("orders", 1, 41, ORIGIN.timestamp)
    assert (m.replay_count, m.is_replay) == (2, True)
    assert m.read_at == ReadPosition("orders.dlq.replay", 0, 3)
    assert payload.identity == ("RID", 0, 3) and payload.origin == ORIGIN  # ledger vs events
    assert payload.origin_fields == ORIGIN.fields == ("orders", "TID", 1, 41)
    assert payload.targets == frozenset({"picky"})


def test_a_replay_of_a_topic_this_group_does_not_watch_is_addressed_to_nobody() -> None:
    """One dead-letter topic, two groups: each reads the replay topic; the other group's
    replays are committed past, not rejected as "not in cohort" into the DLQ again."""
    record = MemoryRecord("shared.dlq.replay", 0, 0, b"v", None, tuple(replayed()))
    payload = build_payload(record, "shared.dlq.replay", 0, 0, "RID", 1, ("payments",))
    assert payload.targets == frozenset() and payload.message.is_replay


def test_a_plain_record_is_a_first_read() -> None:
    record = MemoryRecord("orders", 0, 9, b"v", None, (("trace", b"t"),))
    m = build_payload(record, "orders", 0, 9, "TID", 1).message
    assert (m.replay_count, m.read_at, m.replayed_at) == (0, ReadPosition("orders", 0, 9), None)
