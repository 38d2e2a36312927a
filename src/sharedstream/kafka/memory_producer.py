"""The in-memory Kafka's producer: a ``confluent_kafka.Producer`` of one broker.

It holds what was produced until ``poll()``/``flush()`` serves the delivery reports, as
librdkafka does; the broker (through :class:`DeliveryBroker`) decides each delivery.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException


class DeliveryBroker(Protocol):
    """What a producer asks of its broker."""

    @property
    def hold_deliveries(self) -> bool:
        """While True, delivery reports wait (records are neither delivered nor failed)."""
        ...

    def deliver(self, record: dict[str, Any], attempt: int) -> KafkaError | None:
        """Append ``record`` (``produce()``'s arguments) to its topic, or say why not;
        ``attempt`` counts this producer's deliveries from 0."""
        ...


class MemoryProducer:
    """A ``confluent_kafka.Producer`` of one broker: delivery reports are
    served by ``poll()``/``flush()``; ``queue.buffering.max.messages`` bounds the queue,
    and a record over ``message.max.bytes`` is refused by ``produce()`` itself."""

    def __init__(self, broker: DeliveryBroker, config: dict[str, Any]) -> None:
        self.broker = broker
        self.config = config
        self._limit = int(config.get("queue.buffering.max.messages", 100_000))
        self._max_bytes = int(config.get("message.max.bytes", 1_000_000))
        self._lock = threading.Lock()
        self._pending: list[tuple[dict[str, Any], Callable[[Any, Any], None] | None]] = []
        self.attempts = 0

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                **kwargs: Any) -> None:
        if len(value or b"") + len(key or b"") > self._max_bytes:  # refused before queueing
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        with self._lock:
            if len(self._pending) >= self._limit:
                raise BufferError("Local: Queue full")
            report = kwargs.pop("on_delivery", None)
            self._pending.append(({"topic": topic, "value": value, "key": key, **kwargs}, report))

    def poll(self, timeout: float = 0) -> int:
        return self._deliver()

    def flush(self, timeout: float = -1) -> int:
        self._deliver()
        with self._lock:
            return len(self._pending)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)

    def _deliver(self) -> int:
        if self.broker.hold_deliveries:
            return 0
        with self._lock:
            pending, self._pending = self._pending, []
        for record, report in pending:
            attempt, self.attempts = self.attempts, self.attempts + 1
            error = self.broker.deliver(record, attempt)
            if report is not None:
                report(error, None)
        return len(pending)
