"""Sending dead-letter records and classifying their delivery errors.

A rejected message becomes terminal only when its record's *per-message*
delivery report says the broker has it (``acks=all``, idempotent producer); a
``flush()`` returning proves nothing about one message. Transient failures
(timeouts, broker down) hold the message and the record is produced again after
a backoff: a duplicate record is possible, a missing one is not (each carries
an identity header so tools dedupe). Permanent refusals (the record is too
large) are handed to the rejection recorder instead, so the partition moves on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from sharedstream.producer.dlq_headers import build_dlq_headers
from sharedstream.producer.payload import KafkaPayload

# Errors no retry can fix: the record itself is unacceptable to the broker.
PERMANENT_ERRORS = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_MSG_SIZE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_MSG,
    }
)

DeliveryDone = Callable[[KafkaError | None], None]


def is_permanent(error: KafkaError) -> bool:
    return error.code() in PERMANENT_ERRORS


class DeadLetterSender:
    """Produces dead-letter records; ``done`` runs from ``poll``/``flush`` (the consumer thread)
    or synchronously when ``produce`` refuses at once."""

    def __init__(self, producer: Any, topic: str, consumer_group: str) -> None:
        self._producer = producer
        self.topic = topic
        self._group = consumer_group

    def send(
        self, payload: KafkaPayload, rejections: Mapping[str, str], done: DeliveryDone
    ) -> None:
        msg = payload.message
        headers = build_dlq_headers(
            original_headers=msg.headers,
            origin=payload.origin,
            consumer_group=self._group,
            rejections=rejections,
            replay_count=payload.replay_count,
        )
        kwargs: dict[str, Any] = {"headers": headers, "on_delivery": lambda err, _m: done(err)}
        if msg.timestamp > 0:
            kwargs["timestamp"] = msg.timestamp
        try:
            self._producer.produce(self.topic, msg.value, msg.key, **kwargs)
        except BufferError:
            done(KafkaError(KafkaError._QUEUE_FULL, "dead-letter producer queue full"))
        except KafkaException as exc:
            done(exc.args[0])

    def poll(self) -> None:
        self._producer.poll(0)

    def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` s for outstanding reports; the number still outstanding."""
        remaining: int = self._producer.flush(timeout)
        return remaining
