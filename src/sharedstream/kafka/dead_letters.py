"""Sending dead-letter records and classifying their delivery errors.

A rejected message becomes terminal only when its record's *per-message*
delivery report says the broker has it (``acks=all``, idempotent producer); a
``flush()`` returning proves nothing about one message. Transient failures
(timeouts, broker down) hold the message and the record is produced again after
a backoff: a duplicate record is possible, a missing one is not (each carries
an identity header so tools dedupe). Permanent refusals (the record is too
large) are handed to the rejection recorder instead, so the partition moves on.

A dead-letter topic deleted and recreated under a running triggerer: a record the
broker acknowledged may sit in the incarnation that is gone (librdkafka produces by
name and learns of a new topic id only from its next metadata refresh). The sender
therefore keeps every record acknowledged since the DLQ topic's id was last confirmed
unchanged (:meth:`DeadLetterSender.mark` / :meth:`confirm`, driven by the producer's
periodic topic-id check); when the id changes, it switches to a fresh producer and sends
those records again to the new incarnation (:meth:`reincarnate`). Failure window: a
crash between the change and the resend loses the records of the old incarnation's
last check interval from the DLQ (their messages are committed past).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from sharedstream.kafka.dlq_headers import build_dlq_headers
from sharedstream.kafka.payload import KafkaPayload

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
        # send() runs on the event loop, reincarnate() on the consumer thread.
        self._lock = threading.Lock()
        # Acknowledged since the topic id was last confirmed; appended to and trimmed on
        # the consumer thread only (delivery reports are served there).
        self._acknowledged: list[tuple[KafkaPayload, Mapping[str, str]]] = []
        # Resends the broker refused (the new topic not ready yet): sent again at the next
        # confirmation.
        self._unsent: list[tuple[KafkaPayload, Mapping[str, str]]] = []
        self.resent = 0

    def send(
        self, payload: KafkaPayload, rejections: Mapping[str, str], done: DeliveryDone
    ) -> None:
        def report(error: KafkaError | None) -> None:
            if error is None:
                self._acknowledged.append((payload, rejections))
            done(error)

        self._produce(payload, rejections, report)

    def mark(self) -> int:
        """How many acknowledged records a topic-id check starting now vouches for."""
        return len(self._acknowledged)

    def confirm(self, mark: int) -> None:
        """The check started at ``mark`` found the same topic id: those records are safe.

        Resends that failed earlier are sent again now.
        """
        del self._acknowledged[:mark]
        again, self._unsent = self._unsent, []
        self._resend(again)

    def reincarnate(self, producer: Any, timeout: float) -> int:
        """The topic was recreated: switch to ``producer``, send what may be lost again.

        The old producer is flushed first (within ``timeout``) so no report of a record
        it still holds is dropped. A resend never fails its message (committed past
        already): acknowledged, it waits for the next check like any record; refused, it
        is sent again at the next check. Returns how many records are sent again.
        """
        with self._lock:
            old = self._producer
            if old is not None:
                self._producer = producer
        if old is None:  # closed meanwhile: the stream is ending, nothing is sent again
            return 0
        old.flush(timeout)
        del old  # destroyed here, on the consumer thread (see close())
        again, self._acknowledged = self._acknowledged + self._unsent, []
        self._unsent = []
        self._resend(again)
        return len(again)

    def _resend(self, records: list[tuple[KafkaPayload, Mapping[str, str]]]) -> None:
        for entry in records:
            def settle(error: KafkaError | None,
                       entry: tuple[KafkaPayload, Mapping[str, str]] = entry) -> None:
                (self._acknowledged if error is None else self._unsent).append(entry)

            self._produce(*entry, settle)
        self.resent += len(records)

    def _produce(self, payload: KafkaPayload, rejections: Mapping[str, str],
                 done: DeliveryDone) -> None:
        msg = payload.message
        headers = build_dlq_headers(
            original_headers=msg.headers,
            origin=payload.origin,
            consumer_group=self._group,
            rejections=rejections,
            replay_count=payload.replay_count,
            message=msg,
        )
        kwargs: dict[str, Any] = {"headers": headers, "on_delivery": lambda err, _m: done(err)}
        if msg.timestamp > 0:
            kwargs["timestamp"] = msg.timestamp
        try:
            with self._lock:
                if self._producer is None:
                    raise KafkaException(KafkaError(KafkaError._DESTROY,
                                                    "dead-letter sender closed"))
                self._producer.produce(self.topic, msg.value, msg.key, **kwargs)
        except BufferError:
            done(KafkaError(KafkaError._QUEUE_FULL, "dead-letter producer queue full"))
        except KafkaException as exc:
            done(exc.args[0])

    def poll(self) -> None:
        with self._lock:
            producer = self._producer
        if producer is not None:
            producer.poll(0)

    def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` s for outstanding reports; the number still outstanding."""
        with self._lock:
            producer = self._producer
        remaining: int = 0 if producer is None else producer.flush(timeout)
        return remaining

    def close(self, timeout: float) -> int:
        """Flush within ``timeout`` s, then destroy the producer on this thread.

        Why not leave it to the garbage collector: the sender lives in the stream's
        reference cycles (bound callbacks, the ledger), so its producer would be freed
        by whichever thread next runs a collection, and a librdkafka thread finishing
        an admin request is one: librdkafka aborts the process when a client is
        destroyed on its own thread. A send after this fails as transient (the
        message stays uncommitted and is read again by the next owner). Returns the
        records whose reports were still outstanding.
        """
        with self._lock:
            producer, self._producer = self._producer, None
        if producer is None:
            return 0
        remaining: int = producer.flush(timeout)
        return remaining
