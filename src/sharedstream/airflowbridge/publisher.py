"""Airflow -> Kafka: publish one instance's asset events to a topic, exactly in order.

One pass (:meth:`AirflowPublisher.publish_once`):

1. read the cursor of (instance, topic) from the asset state store
   (asset ``airflow:<instance>``, key ``cursor/<topic>``, value ``[timestamp µs, id]``);
2. list the instance's events after it (``GET /api/v2/assets/events``, oldest first);
3. produce each to Kafka with an idempotent producer (``enable.idempotence``,
   ``acks=all``: no broker-side duplicates or reordering on internal retries), except
   events carrying the bridge marker: they came from another instance through the
   bridge and publishing them again would loop;
4. ``flush()`` and check every delivery report: a single failure raises
   :class:`PublishError` and the cursor does not move;
5. only then ``advance`` the cursor (monotonic: a stale concurrent publisher can never
   move it back) to the last listed event, skipped ones included.

Failure window: a crash (or a failed delivery) after some records were delivered
and before step 5 republishes them on the next pass, so Kafka may hold a record
twice. The sink makes that harmless (delivered-set in its state store plus a marker
check in the target). Nothing is ever skipped: the cursor only moves past records
whose delivery the broker confirmed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from confluent_kafka import KafkaError, Message, Producer

from sharedstream.airflowbridge.client import AirflowClient, cursor_of
from sharedstream.airflowbridge.envelope import Envelope, is_bridged
from sharedstream.statestore import AssetScope, StateStore

log = logging.getLogger(__name__)

class PublishError(RuntimeError):
    """Some records of a pass were not confirmed by the broker; the cursor did not move."""


@dataclass(frozen=True, slots=True)
class PassResult:
    listed: int
    published: int
    skipped_bridged: int
    cursor: list[int] | None


def cursor_scope(instance: str) -> AssetScope:
    return AssetScope(name=f"airflow:{instance}")


class AirflowPublisher:
    """Publishes the asset events of ``client``'s instance to ``topic``."""

    def __init__(self, *, client: AirflowClient, producer: Producer, topic: str,
                 store: StateStore, batch_size: int = 500, flush_timeout: float = 30.0) -> None:
        self.client = client
        self.producer = producer
        self.topic = topic
        self.batch_size = batch_size
        self.flush_timeout = flush_timeout
        self.cursor_key = f"cursor/{topic}"
        self.state = store.asset(cursor_scope(client.name))

    async def publish_once(self) -> PassResult:
        """One pass (see the module doc); a PassResult with what it did."""
        stored = await self.state.aget(self.cursor_key)
        cursor = [int(v) for v in stored] if stored is not None else None
        events = await self.client.events_after(cursor, self.batch_size)
        if not events:
            return PassResult(0, 0, 0, cursor)
        to_send = [Envelope.from_event(self.client.name, e) for e in events if not is_bridged(e)]
        if to_send:
            await asyncio.to_thread(self._produce_all, to_send)
        last = cursor_of(events[-1])
        await self.state.aadvance(self.cursor_key, last)
        log.info("airflow %r -> %s: %d published, %d bridged skipped, cursor %s",
                 self.client.name, self.topic, len(to_send), len(events) - len(to_send), last)
        return PassResult(len(events), len(to_send), len(events) - len(to_send), last)

    def _produce_all(self, envelopes: list[Envelope]) -> None:
        """Produce, flush, and raise unless every record has a successful delivery report."""
        failures: list[str] = []
        confirmed = 0

        def report(err: KafkaError | None, msg: Message) -> None:
            nonlocal confirmed
            if err is None:
                confirmed += 1
            else:
                failures.append(str(err))

        for envelope in envelopes:
            while True:
                try:
                    self.producer.produce(self.topic, key=envelope.key(),
                                          value=envelope.to_bytes(), on_delivery=report)
                    break
                except BufferError:
                    self.producer.poll(0.5)  # local queue full: let deliveries drain
        remaining = self.producer.flush(self.flush_timeout)
        if failures or remaining or confirmed != len(envelopes):
            raise PublishError(
                f"{len(envelopes) - confirmed} of {len(envelopes)} records not confirmed "
                f"({remaining} still queued after {self.flush_timeout}s); first error: "
                f"{failures[0] if failures else 'none'}")

    async def run(self, stop: asyncio.Event, interval: float) -> None:
        """Pass after pass until ``stop``; a failed pass is logged and retried after ``interval``.

        Errors of the instance or the broker never end the loop: the cursor has not
        moved, so the next pass resends exactly what was not confirmed.
        """
        while not stop.is_set():
            try:
                result = await self.publish_once()
            except Exception as exc:  # logged; the cursor did not move, the pass is retried
                log.warning("airflow %r -> %s: pass failed, retrying in %ss: %s",
                            self.client.name, self.topic, interval, exc)
                result = None
            if result is not None and result.listed >= self.batch_size:
                continue  # a backlog: no pause between full batches
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
