"""Process-wide inputs of Kafka producers that a trigger's kwargs do not carry.

``BaseEventTrigger.create_shared_stream_producer`` receives only the trigger's
serialized kwargs, yet a Kafka producer also needs the config file's
``[connections]`` table and the triggerer's rejection recorder (the
``rejected_message`` writer). The triggerer sets both once at start-up with
:func:`configure_kafka_runtime`, before any group starts.

Unconfigured, connections come from ``SHAREDSTREAM_CONN_<ID>`` only and there is
no recorder: a rejection that needs one is *held* (never committed past) and
reported as unready, so nothing vanishes because a process forgot to wire it.

``topic_id_resolver`` replaces the broker's topic-id lookup (``describe_topics``)
for clusters that cannot answer it: librdkafka's in-process mock cluster of
``sharedstream demo``. None means the real lookup.

``membership``: the ``group.instance.id`` of each consumer group, derived by the
triggerer (``kafka/membership.py``); None joins as dynamic members (unless a
connection sets its own id).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sharedstream.kafka.membership import StaticMembership
from sharedstream.kafka.rejections import RejectionRecorder
from sharedstream.kafka.topic_ids import TopicIdResolver


@dataclass(frozen=True, slots=True)
class KafkaRuntime:
    connections: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    recorder: RejectionRecorder | None = None
    environ: Mapping[str, str] | None = None  # None: os.environ at resolution time
    topic_id_resolver: TopicIdResolver | None = None  # None: describe_topic_ids
    membership: StaticMembership | None = None


_runtime = KafkaRuntime()


def configure_kafka_runtime(
    connections: Mapping[str, Mapping[str, Any]],
    recorder: RejectionRecorder | None,
    environ: Mapping[str, str] | None = None,
    topic_id_resolver: TopicIdResolver | None = None,
    membership: StaticMembership | None = None,
) -> None:
    """Set the connections table and rejection recorder every Kafka group will use."""
    global _runtime
    _runtime = KafkaRuntime(dict(connections), recorder, environ, topic_id_resolver,
                            membership)


def kafka_runtime() -> KafkaRuntime:
    return _runtime
