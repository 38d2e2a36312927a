"""DeadLetterSender across a recreated dead-letter topic: what is sent again, and when.

A record the broker acknowledged may sit in a DLQ incarnation that is gone; the sender
keeps what was acknowledged since the topic id was last confirmed and, when the id
changes, sends exactly that again through a fresh producer.
"""

from __future__ import annotations

import sys
from typing import Any

from confluent_kafka import KafkaError

from sharedstream.core.message import KafkaMessage
from sharedstream.kafka.dead_letters import DeadLetterSender, is_permanent
from sharedstream.kafka.payload import KafkaPayload, first_read_class, new_message


class Recorder:
    """A DLQ producer whose reports fire on poll()/flush(), each with the scripted error."""

    def __init__(self, errors: list[KafkaError | None] | None = None) -> None:
        self.sent: list[int] = []
        self.pending: list[tuple[int, Any]] = []
        self.errors = errors or []
        self.flushed = 0

    def produce(self, topic: str, value: Any, key: Any, **kwargs: Any) -> None:
        self.pending.append((int(value), kwargs["on_delivery"]))

    def poll(self, timeout: float = 0.0) -> int:
        pending, self.pending = self.pending, []
        for offset, report in pending:
            error = self.errors.pop(0) if self.errors else None
            if error is None:
                self.sent.append(offset)
            report(error, None)
        return 0

    def flush(self, timeout: float) -> int:
        self.flushed += 1
        self.poll(timeout)
        return 0


def payload(offset: int) -> KafkaPayload:
    fields = KafkaMessage("orders", 0, offset, 1, None, str(offset).encode())
    read: KafkaPayload = new_message(first_read_class(("orders", 0), 1, "id-orders"), fields)
    return read


def send(sender: DeadLetterSender, offsets: range, outcomes: list[KafkaError | None]) -> None:
    for offset in offsets:
        sender.send(payload(offset), {"w": "bad"}, outcomes.append)


def test_only_records_acknowledged_since_the_last_confirmation_are_sent_again() -> None:
    old, outcomes = Recorder(), list[KafkaError | None]()
    sender = DeadLetterSender(old, "orders.dlq", "g")
    send(sender, range(3), outcomes)
    sender.poll()
    mark = sender.mark()  # a check starts: it vouches for 0..2 if the id is unchanged
    send(sender, range(3, 5), outcomes)
    sender.poll()
    sender.confirm(mark)
    send(sender, range(5, 7), outcomes)
    new = Recorder()
    assert sender.reincarnate(new, timeout=1.0) == 4  # 3, 4, and 5, 6 flushed from the old
    assert old.flushed == 1 and outcomes == [None] * 7
    new.poll()
    assert sorted(new.sent) == [3, 4, 5, 6] and sender.resent == 4


def test_a_refused_resend_is_sent_again_at_the_next_check_and_never_dropped() -> None:
    sender = DeadLetterSender(Recorder(), "orders.dlq", "g")
    send(sender, range(2), [])
    sender.poll()
    refused = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
    new = Recorder(errors=[refused])
    sender.reincarnate(new, timeout=1.0)
    new.poll()
    assert new.sent == [1]
    mark = sender.mark()  # 1 is acknowledged by the new incarnation; 0 waits to be resent
    sender.confirm(mark)
    new.poll()
    assert sorted(new.sent) == [0, 1]
    assert sender.reincarnate(Recorder(), timeout=1.0) == 1  # 0, not yet vouched for


def test_close_flushes_then_lets_go_and_later_sends_stay_uncommitted() -> None:
    """The stream's end hands the producer back (destroyed on the closing thread, not
    by the garbage collector); a send after that must hold its message, not lose it."""
    producer, outcomes = Recorder(), list[KafkaError | None]()
    sender = DeadLetterSender(producer, "orders.dlq", "g")
    send(sender, range(2), outcomes)
    assert sender.close(1.0) == 0
    assert producer.sent == [0, 1] and outcomes == [None, None]
    assert sys.getrefcount(producer) == 2  # this test's name and getrefcount's argument
    send(sender, range(2, 3), outcomes)
    late = outcomes[-1]
    assert late is not None and late.code() == KafkaError._DESTROY
    assert not is_permanent(late)  # transient: the message is held, never committed past
    sender.poll()  # harmless once closed
    assert sender.close(1.0) == 0 and sender.flush(1.0) == 0
    assert sender.reincarnate(Recorder(), 1.0) == 0  # nothing to switch to any more
    assert producer.sent == [0, 1]
