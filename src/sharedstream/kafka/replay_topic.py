"""A dead-letter topic's replay topic: found, or created the way Kafka Streams creates its
internal topics.

``dlq replay`` writes to ``<dlq topic>.replay`` (:func:`replay_topic_name`) so that a
replay reaches only the groups that dead-letter to that topic, never the other readers of
the original topic. Those groups read it besides their watched topics. Nobody has to
create it: ``sharedstream run`` (at start-up), the group's consumer (when it opens) and
``dlq replay`` create it when it is missing, with the dead-letter topic's partition count
and the broker's default replication factor, and log that they did. ``check`` only
reports it.

Failure window: two processes may create it at once; the one the broker answers "already
exists" takes the topic as it is. A broker that refuses the creation (no CREATE
permission, a topic policy) is a :class:`ReplayTopicError` naming the topic, the reason
and the fix: create it yourself. A broker that does not answer is a
:class:`~sharedstream.kafka.topics.BrokerUnreachableError`, as at every other start-up
check.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from sharedstream.kafka.connections import client_config
from sharedstream.kafka.dlq_headers import replay_topic_name
from sharedstream.kafka.topics import BrokerUnreachableError

log = logging.getLogger(__name__)


class ReplayTopicError(RuntimeError):
    """The replay topic is missing and could not be created (or its dead-letter topic is
    missing); the message says what to do."""


@dataclass(frozen=True, slots=True)
class ReplayTopic:
    """A replay topic as found: ``partitions`` it has, or that creating it gives (the
    dead-letter topic's); ``created`` when this call created it."""

    name: str
    dlq_topic: str
    partitions: int
    exists: bool
    created: bool = False

    def describe(self) -> str:
        """One line for ``check`` and the start-up log."""
        if self.created:
            return (f"replay topic {self.name}: created with {self.partitions} partition(s), "
                    f"as {self.dlq_topic}")
        if self.exists:
            return f"replay topic {self.name}: present ({self.partitions} partition(s))"
        return (f"replay topic {self.name}: missing; run creates it with {self.partitions} "
                f"partition(s), as {self.dlq_topic}")


def find_replay_topic(config: Mapping[str, Any], dlq_topic: str,
                      timeout: float = 10.0) -> ReplayTopic:
    """The replay topic of ``dlq_topic`` as the cluster has it; changes nothing."""
    admin = AdminClient(client_config(config))
    try:
        return _find(admin, dlq_topic, timeout)
    finally:
        del admin  # released here, on this thread, even when a traceback keeps the frame


def ensure_replay_topic(config: Mapping[str, Any], dlq_topic: str,
                        timeout: float = 10.0) -> ReplayTopic:
    """The replay topic of ``dlq_topic``, created first when missing (see the module doc);
    returns once every partition has a leader, so producing to it cannot fail at once."""
    admin = AdminClient(client_config(config))
    try:
        found = _find(admin, dlq_topic, timeout)
        if found.exists:
            return found
        futures = admin.create_topics(
            [NewTopic(found.name, num_partitions=found.partitions, replication_factor=-1)],
            operation_timeout=timeout, request_timeout=timeout)
        try:
            futures[found.name].result(timeout)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not (isinstance(error, KafkaError)
                    and error.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                reason = error.str() if isinstance(error, KafkaError) else str(exc)
                raise ReplayTopicError(
                    f"replay topic {found.name!r} (for dead-letter topic {dlq_topic!r}) is "
                    f"missing and the broker refused to create it: {reason}; create it with "
                    f"{found.partitions} partition(s), or let this connection create "
                    "topics") from None
        _await_leaders(admin, found.name, timeout)
        log.info("created replay topic %s with %d partition(s), as dead-letter topic %s",
                 found.name, found.partitions, dlq_topic)
        return ReplayTopic(found.name, dlq_topic, found.partitions, exists=True, created=True)
    finally:
        del admin


def _find(admin: Any, dlq_topic: str, timeout: float) -> ReplayTopic:
    name = replay_topic_name(dlq_topic)
    try:
        topics = admin.list_topics(timeout=timeout).topics
    except KafkaException as exc:
        raise BrokerUnreachableError(f"replay topic {name!r}: the broker did not answer: "
                                     f"{exc.args[0].str() if exc.args else exc}") from None
    replay = topics.get(name)
    if replay is not None and replay.error is None:
        return ReplayTopic(name, dlq_topic, len(replay.partitions), exists=True)
    dlq = topics.get(dlq_topic)
    if dlq is None or dlq.error is not None:
        raise ReplayTopicError(f"dead-letter topic {dlq_topic!r} not found: create it first "
                               f"(its replay topic {name!r} is created with its partition "
                               "count)")
    return ReplayTopic(name, dlq_topic, len(dlq.partitions), exists=False)


def _await_leaders(admin: Any, name: str, timeout: float) -> None:
    """A created topic's partitions get their leaders a moment later; wait for them."""
    deadline = time.monotonic() + timeout
    while True:
        meta = admin.list_topics(topic=name, timeout=timeout).topics.get(name)
        if (meta is not None and meta.error is None and meta.partitions
                and all(p.leader >= 0 for p in meta.partitions.values())):
            return
        if time.monotonic() >= deadline:
            raise ReplayTopicError(f"replay topic {name!r}: created, but its partitions have "
                                   f"no leader after {timeout:g}s")
        time.sleep(0.05)
