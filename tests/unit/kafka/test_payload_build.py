"""The consumer thread builds a first read's message by its fields in order (issue 27):
it must equal the message the NamedTuple's constructor builds, defaults included, so a
field added to ``KafkaMessage`` fails here rather than shifting every field after it."""

from __future__ import annotations

from sharedstream.core.message import KafkaMessage
from sharedstream.kafka.memory import MemoryRecord
from sharedstream.kafka.payload import build_payload


def test_a_record_without_headers_is_the_message_the_constructor_builds() -> None:
    record = MemoryRecord("orders", 2, 7, b'{"id": 1}', b"k", None, 5)
    message = build_payload(record, "orders", 2, 7, "TID", 1).message
    assert type(message) is KafkaMessage
    assert message == KafkaMessage("orders", 2, 7, 5, b"k", b'{"id": 1}')
    assert (message.replay_count, message.replayed_at, message.delivery) == (0, None, 1)
    assert message.json == {"id": 1} and message.text == '{"id": 1}'


def test_a_record_with_headers_keeps_them_in_order() -> None:
    headers = (("b", b"2"), ("a", None), ("b", b"3"))
    record = MemoryRecord("orders", 0, 9, None, None, headers, -1)
    message = build_payload(record, "orders", 0, 9, "TID", 1).message
    assert message == KafkaMessage("orders", 0, 9, -1, None, None, headers)
    assert message.json is None and message._replace(delivery=2).delivery == 2
