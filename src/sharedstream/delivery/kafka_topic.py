"""``kind = "kafka"``: one record per event on a topic, keyed by the asset's name.

The producer is idempotent with ``acks=all`` (its delivery report means durable), so
librdkafka's own retries never write twice; a repeat after a crash (events sent but
not yet covered by the stored cursor) is a second record with the same identity in
the ``sharedstream.event.identity`` header, for consumers to drop. The value is the
event's JSON document, or with ``value_format`` ``avro`` / ``json_schema`` that document
serialised with a registered schema (:mod:`sharedstream.delivery.registry_values`). An
event persisted while tracing was on also carries the W3C ``traceparent`` header of its
delivery span. A record the broker refuses for good (too large, ...) is a permanent
refusal; anything else not confirmed within the flush is transient.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from sharedstream import tracing
from sharedstream.delivery.document import ID_HEADER, IDENTITY_HEADER, event_body
from sharedstream.delivery.errors import (
    DeliveryError,
    PermanentDeliveryError,
    TransientDeliveryError,
)
from sharedstream.delivery.registry_values import RegistryValues
from sharedstream.delivery.sender import Results
from sharedstream.delivery.settings import KafkaDestination
from sharedstream.kafka.connections import producer_config
from sharedstream.kafka.dead_letters import is_permanent
from sharedstream.statestore.events import EventRecord
from sharedstream.tracing import deliveryspans
from sharedstream.tracing.context import carrier_of

FLUSH_TIMEOUT_S = 30.0


class KafkaTopicSender:
    def __init__(self, options: KafkaDestination, connection: Mapping[str, Any], *,
                 producer_factory: Any = Producer) -> None:
        self._topic = options.topic
        self._producer = producer_factory(producer_config(connection))
        self._registry = None if options.value_format == "json" else RegistryValues(options)

    async def send(self, events: Sequence[EventRecord], *, maybe_sent: bool) -> Results:
        outcome: dict[int, DeliveryError | None] = {}

        def report(event_id: int) -> Any:
            def on_delivery(error: KafkaError | None, _message: Any) -> None:
                if error is None:
                    outcome[event_id] = None
                elif is_permanent(error):
                    outcome[event_id] = PermanentDeliveryError(
                        f"kafka refused the record: {error.str()}", error.name().lower())
                else:
                    outcome[event_id] = TransientDeliveryError(
                        f"kafka: {error.str()}", error.name().lower())
            return on_delivery

        # Registry formats: serialised off the loop (the first one registers the schema).
        bodies = None if self._registry is None else await asyncio.to_thread(
            self._registry.bodies, events)
        spans: dict[int, Any] = {}  # event id -> its deliver span, while tracing is on
        for index, event in enumerate(events):
            body = event_body(event) if bodies is None else bodies[index]
            if isinstance(body, DeliveryError):
                outcome[event.id] = body
                if isinstance(body, TransientDeliveryError):
                    break  # bodies stops here too: the rest waits with the cursor
                continue
            headers = [(IDENTITY_HEADER, event.identity.encode()),
                       (ID_HEADER, str(event.id).encode())]
            if tracing.tracer is not None and event.trace_context is not None:
                span = spans[event.id] = deliveryspans.start_delivery(
                    event.trace_context, "kafka", event.id,
                    {"messaging.system": "kafka", "messaging.destination.name": self._topic})
                headers += [(k, v.encode()) for k, v in carrier_of(span).items()]
            try:
                self._producer.produce(
                    self._topic, key=event.asset.encode(), value=body,
                    headers=headers, on_delivery=report(event.id))
            except BufferError:
                break  # the local queue is full: the rest waits for the next round
            except KafkaException as exc:
                error = exc.args[0]
                kind = PermanentDeliveryError if is_permanent(error) else TransientDeliveryError
                outcome[event.id] = kind(f"kafka refused the record: {error.str()}",
                                         error.name().lower())
        await asyncio.to_thread(self._producer.flush, FLUSH_TIMEOUT_S)
        unconfirmed = TransientDeliveryError("kafka: not confirmed within the flush", "timeout")
        for event_id, span in spans.items():
            deliveryspans.end_delivery(span, outcome.get(event_id, unconfirmed))
        results: Results = []
        for event in events:
            result = outcome.get(event.id, unconfirmed)
            results.append(result)
            if isinstance(result, TransientDeliveryError):
                break
        return results

    async def aclose(self) -> None:
        await asyncio.to_thread(self._producer.flush, FLUSH_TIMEOUT_S)
