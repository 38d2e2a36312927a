"""The consumer thread builds a first read's message by its fields in order (issue 27):
it must equal the message the NamedTuple's constructor builds, defaults included, so a
field added to ``KafkaMessage`` fails here rather than shifting every field after it.
That message is its own payload (one object per record): to a watcher it must be a
``KafkaMessage`` in every way, to the ledger and dead letters what the payload was."""

from __future__ import annotations

import copy
import pickle

from sharedstream.core.message import Coordinates, KafkaMessage
from sharedstream.kafka.memory import MemoryRecord
from sharedstream.kafka.payload import build_payload, first_read_class


def test_a_record_without_headers_is_the_message_the_constructor_builds() -> None:
    record = MemoryRecord("orders", 2, 7, b'{"id": 1}', b"k", None, 5)
    message = build_payload(record, "orders", 2, 7, "TID", 1).message
    built = KafkaMessage("orders", 2, 7, 5, b"k", b'{"id": 1}')
    assert isinstance(message, KafkaMessage) and type(message).__name__ == "KafkaMessage"
    assert message == built and hash(message) == hash(built) and repr(message) == repr(built)
    assert (message.replay_count, message.replayed_at, message.delivery) == (0, None, 1)
    assert message.json == {"id": 1} and message.text == '{"id": 1}'


def test_a_record_with_headers_keeps_them_in_order() -> None:
    headers = (("b", b"2"), ("a", None), ("b", b"3"))
    record = MemoryRecord("orders", 0, 9, None, None, headers, -1)
    message = build_payload(record, "orders", 0, 9, "TID", 1).message
    assert message == KafkaMessage("orders", 0, 9, -1, None, None, headers)
    assert message.json is None and message._replace(delivery=2).delivery == 2


def test_a_first_read_is_its_own_payload() -> None:
    record = MemoryRecord("orders", 2, 7, b"v", None, None, 5)
    read_as = first_read_class(("orders", 2), 3, "TID")
    p = build_payload(record, "orders", 2, 7, "TID", 3, (), read_as)
    assert p.message is p and type(p) is read_as
    assert (p.topic, p.partition, p.offset, p.timestamp) == ("orders", 2, 7, 5)
    assert (p.generation, p.topic_id, p.partition_key) == (3, "TID", ("orders", 2))
    assert (p.targets, p.replay_count, p.identity) == (None, 0, ("TID", 2, 7))
    assert p.origin == Coordinates("orders", "TID", 2, 7, 5)
    assert p.origin_fields == ("orders", "TID", 2, 7)  # what its event rows are keyed by
    # Each partition and generation has its own class; a later one is another class.
    again = build_payload(record, "orders", 2, 7, "TID", 4)
    assert type(again) is not read_as and again.generation == 4 and again == p


def test_a_pickle_or_copy_of_a_first_read_is_a_plain_message() -> None:
    message = build_payload(MemoryRecord("orders", 0, 1, b"1", None, None, 5),
                            "orders", 0, 1, "TID", 1).message
    assert message.json == 1
    for other in (pickle.loads(pickle.dumps(message)), copy.copy(message),
                  copy.deepcopy(message)):
        assert type(other) is KafkaMessage and other == message and other.__dict__ == {}
