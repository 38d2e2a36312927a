"""``KafkaSharedStreamTrigger``: watch Kafka topics through one shared consumer per topic set.

Every trigger with the same topics and connection joins one shared-stream group
(one consumer, one consumer group ``<group.id>.<topics joined by +>``). The group's
producer is built from :meth:`KafkaSharedStreamTrigger.shared_stream_arguments`;
every member must agree on them (``check_shared_stream_group``), or the triggerer
refuses to start: a silent "first subscriber wins" would send one watcher's dead
letters to another watcher's topic. Subclasses may add filter-only kwargs freely.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Hashable, Iterator, Mapping, Sequence
from typing import Any

from sharedstream.core.batch import MessageBatch
from sharedstream.core.message import TEXT, KafkaMessage, ValueDecodeError, ValueDecoder
from sharedstream.kafka.connections import resolve_callable, resolve_connection
from sharedstream.kafka.dlq_headers import replay_topic_name
from sharedstream.kafka.producer import KafkaSharedStreamProducer
from sharedstream.kafka.runtime import kafka_runtime
from sharedstream.kafka.topic_ids import describe_topic_ids
from sharedstream.serde import to_payload
from sharedstream.triggers.base import (
    BaseEventTrigger,
    TriggerEvent,
    classpath,
    reject_shared_stream_event,
)

log = logging.getLogger(__name__)

STREAM_KIND = "kafka-shared-stream"


class KafkaSharedStreamTrigger(BaseEventTrigger):
    """Turns each message of ``topics`` into an event of its decoded value (override the
    filter to do more).

    ``value_deserializer`` (a :mod:`sharedstream.serde` declaration: ``JsonValue``,
    ``AvroValue(model=Order)``, ...) says how values are read; None reads UTF-8 text.
    Watchers of the group declaring equal deserialisers share one decode per message.
    It is the filter's own argument, not the group's: watchers reading the same topics
    with different deserialisers still share one consumer.

    Tombstones (value None) are acknowledged without an event and counted in
    :attr:`tombstones_skipped`; values that do not decode are rejected with the
    deserialiser's reason (``"not UTF-8"`` for text; the schema id and the error for a
    registry format), to the dead-letter topic or ``rejected_message``.
    """

    def __init__(
        self,
        *,
        topics: Sequence[str],
        kafka_config_id: str = "kafka_default",
        poll_timeout: float = 1.0,
        dlq_topic: str | None = None,
        value_deserializer: ValueDecoder | None = None,
    ) -> None:
        if isinstance(topics, str):
            raise TypeError("topics must be a list of topic names, not a string")
        self.topics = sorted(set(topics))
        if not self.topics:
            raise ValueError("KafkaSharedStreamTrigger needs at least one topic")
        self.kafka_config_id = kafka_config_id
        self.poll_timeout = poll_timeout
        self.dlq_topic = dlq_topic
        self.value_deserializer = value_deserializer
        self.tombstones_skipped = 0

    def shared_stream_key(self) -> Hashable:
        return (STREAM_KIND, tuple(self.topics), self.kafka_config_id)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        kwargs: dict[str, Any] = {
            "topics": list(self.topics),
            "kafka_config_id": self.kafka_config_id,
            "poll_timeout": self.poll_timeout,
            "dlq_topic": self.dlq_topic,
        }
        # Only when declared: subclasses whose __init__ predates the argument still rebuild.
        if self.value_deserializer is not None:
            kwargs["value_deserializer"] = self.value_deserializer
        return classpath(self), kwargs

    def shared_stream_arguments(self) -> Mapping[str, Any]:
        """What the group's consumer is built from; a subclass's own kwargs are not in it."""
        return {
            "topics": list(self.topics),
            "kafka_config_id": self.kafka_config_id,
            "poll_timeout": self.poll_timeout,
            "dlq_topic": self.dlq_topic,
        }

    @property
    def replay_topic(self) -> str | None:
        """Where ``dlq replay`` sends this group's dead letters by default: read by the
        group's consumer besides ``topics``, by nobody else. None without a ``dlq_topic``."""
        return None if self.dlq_topic is None else replay_topic_name(self.dlq_topic)

    @classmethod
    def create_shared_stream_producer(cls, kwargs: Mapping[str, Any]) -> KafkaSharedStreamProducer:
        """The group's producer; connection and recorder come from the process runtime.
        With a ``dlq_topic`` it also reads that topic's replay topic."""
        runtime = kafka_runtime()
        config_id = str(kwargs.get("kafka_config_id", "kafka_default"))
        config = resolve_connection(config_id, runtime.connections, runtime.environ)
        dlq_topic = kwargs.get("dlq_topic")
        return KafkaSharedStreamProducer(
            topics=list(kwargs["topics"]),
            config=config,
            recorder=runtime.recorder,
            connection_id=config_id,
            dlq_topic=dlq_topic,
            replay_topic=None if dlq_topic is None else replay_topic_name(dlq_topic),
            poll_timeout=float(kwargs.get("poll_timeout", 1.0)),
            topic_id_resolver=runtime.topic_id_resolver or describe_topic_ids,
            holds=runtime.holds,
        )

    async def decoded(self, stream: AsyncIterator[Any]
                      ) -> AsyncIterator[tuple[KafkaMessage, Any]]:
        """``(message, value)`` for each message of ``stream``, the value read by
        :attr:`value_deserializer` (text without one), decoded once for the group.

        A value that does not decode is rejected here with its reason and not yielded;
        a tombstone is yielded with the value None. A registry outage raises
        ``SchemaRegistryUnavailable`` out of the filter: the message is held and
        redelivered, never dead-lettered.
        """
        decoder = self.value_deserializer or TEXT
        prepare = getattr(decoder, "prepare", None)  # registry formats: lookups off the loop
        message: KafkaMessage
        async for message in stream:
            try:
                if prepare is not None and (lookup := prepare(message)) is not None:
                    await lookup
                value = message.decoded(decoder)
            except ValueDecodeError as exc:
                reject_shared_stream_event(exc.reason)
                continue
            yield message, value

    def decoded_batch(self, batch: MessageBatch) -> Iterator[tuple[KafkaMessage, Any]]:
        """``(message, value)`` for each message of a batch filter's ``batch``, as
        :meth:`decoded` gives them to a per-message filter: the value read by
        :attr:`value_deserializer` (text without one), decoded once for the group; a value
        that does not decode is rejected with its reason (``batch.reject``) and skipped; a
        tombstone comes with the value None.

        Plain iteration, no await: the batch runner has already looked up the registry
        schemas of the batch (``prepare``) before the call, so a read here is a cache hit.
        """
        decoder = self.value_deserializer or TEXT
        message: KafkaMessage
        for message in batch:
            try:
                value = message.decoded(decoder)
            except ValueDecodeError as exc:
                batch.reject(message, exc.reason)
                continue
            yield message, value

    async def filter_shared_stream(self, stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        decoder = self.value_deserializer or TEXT
        prepare = getattr(decoder, "prepare", None)
        message: KafkaMessage
        # Inlined rather than over decoded(): one async-generator step less per delivery.
        async for message in stream:
            if message.value is None:
                self.tombstones_skipped += 1
                continue
            try:
                if prepare is not None and (lookup := prepare(message)) is not None:
                    await lookup
                value = message.decoded(decoder)
            except ValueDecodeError as exc:
                reject_shared_stream_event(exc.reason)
                continue
            yield TriggerEvent(value if decoder is TEXT else to_payload(value))



class MessageView:
    """A message as ``confluent_kafka.Message`` shows it (``value()``, ``key()``, ...), for
    functions written for Airflow's Kafka provider, which hands them that object."""

    __slots__ = ("_message",)

    def __init__(self, message: KafkaMessage) -> None:
        self._message = message

    def value(self) -> bytes | None:
        return self._message.value

    def key(self) -> bytes | None:
        return self._message.key

    def topic(self) -> str:
        return self._message.topic

    def partition(self) -> int:
        return self._message.partition

    def offset(self) -> int:
        return self._message.offset

    def timestamp(self) -> tuple[int, int]:
        """``(type, milliseconds)``: type 1 (create time), or 0 when unknown."""
        ms = self._message.timestamp
        return (1 if ms >= 0 else 0, ms)

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return list(self._message.headers) or None

    def error(self) -> None:
        return None

    def __len__(self) -> int:
        return len(self._message.value or b"")


class KafkaMessageTrigger(KafkaSharedStreamTrigger):
    """Airflow's ``AwaitMessageTrigger`` way: a function decides what becomes an event.

    ``apply_function`` is the dotted path of a function (``"mypkg.orders.parse"``, as in
    the Kafka provider) called with each message, as ``confluent_kafka.Message`` shows it
    (:class:`MessageView`), then ``apply_function_args`` and ``apply_function_kwargs``.
    A result other than None is the event's payload; None acknowledges the message with
    no event. The function may be async. Raising fails the message for this watcher
    (redelivered with backoff), as a raising filter does.

    It shares the stream with every other Kafka trigger of the same topics and
    connection: the function is not one of the group's arguments.
    """

    def __init__(self, *, topics: Sequence[str], apply_function: str,
                 apply_function_args: Sequence[Any] | None = None,
                 apply_function_kwargs: Mapping[str, Any] | None = None,
                 kafka_config_id: str = "kafka_default", poll_timeout: float = 1.0,
                 dlq_topic: str | None = None) -> None:
        super().__init__(topics=topics, kafka_config_id=kafka_config_id,
                         poll_timeout=poll_timeout, dlq_topic=dlq_topic)
        self.apply_function = apply_function
        self.apply_function_args = list(apply_function_args or [])
        self.apply_function_kwargs = dict(apply_function_kwargs or {})
        try:
            self._function = resolve_callable(apply_function)
        except ValueError as exc:
            raise ValueError(f"apply_function {exc}") from None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        classpath_, kwargs = super().serialize()
        return classpath_, {**kwargs, "apply_function": self.apply_function,
                            "apply_function_args": self.apply_function_args,
                            "apply_function_kwargs": self.apply_function_kwargs}

    async def filter_shared_stream(self, stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            result = self._function(MessageView(message), *self.apply_function_args,
                                    **self.apply_function_kwargs)
            if inspect.isawaitable(result):
                result = await result
            if result is not None:
                yield TriggerEvent(result)
