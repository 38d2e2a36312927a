"""The demo's sample traffic: orders produced over time, two of them poison.

A background thread produces JSON orders round-robin over the topic's partitions
at a modest rate, so the live view has something to show while it happens. Ids
grow by one per order, hence within each partition too (the ``paid_orders``
watermark relies on that). Two poison messages go out on the way: one that is not
JSON and the next order without its ``amount``; ``valid_orders`` dead-letters both
(``paid_orders`` the second too).

Counts are taken from delivery reports, so "produced" means "the broker has it":
the end offset every partition's commit must reach.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Mapping

from confluent_kafka import KafkaError, Message, Producer

STATUSES = ("paid", "paid", "pending", "cancelled")
# None: the next order, paid, without its amount (a real id, so watermarks pass it).
POISON: tuple[bytes | None, ...] = (b"<order id=7>not JSON</order>", None)


class Traffic(threading.Thread):
    """Produces to ``topic`` for ``duration`` seconds; poison at the given offsets in time."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, *, rate: float,
                 duration: float, poison_at: tuple[float, ...],
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(name="demo-traffic", daemon=True)
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.duration = duration
        self.poison_at = poison_at
        self._clock = clock
        self._producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0,
                                   "linger.ms": 5})
        self._lock = threading.Lock()
        self._delivered = dict.fromkeys(range(partitions), 0)
        self._halt = threading.Event()
        self.failures = 0
        self.poison_sent = 0

    def delivered(self) -> Mapping[int, int]:
        """Messages the broker acknowledged, per partition."""
        with self._lock:
            return dict(self._delivered)

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        rng = random.Random(7)
        started = self._clock()
        poison = list(zip(self.poison_at, POISON, strict=False))
        interval = 1.0 / self.rate
        order_id = 0
        while not self._halt.is_set():
            elapsed = self._clock() - started
            if elapsed >= self.duration:
                break
            partition = order_id % self.partitions
            if poison and elapsed >= poison[0][0]:
                bad = poison.pop(0)[1]
                self.poison_sent += 1
                if bad is None:
                    order_id += 1
                    bad = json.dumps({"id": order_id, "status": "paid"}).encode()
                value = bad
            else:
                order_id += 1
                value = json.dumps({"id": order_id, "status": rng.choice(STATUSES),
                                    "amount": round(rng.uniform(5, 200), 2)}).encode()
            self._producer.produce(self.topic, value, partition=partition,
                                   on_delivery=self._on_delivery)
            self._producer.poll(0)
            self._halt.wait(interval)
        self._producer.flush(10)

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        partition = message.partition()
        with self._lock:
            if error is None and partition is not None:
                self._delivered[partition] += 1
            else:
                self.failures += 1
