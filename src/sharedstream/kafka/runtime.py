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

Several triggerers may run in one process (embedded, each ``async with Triggerer``), each
with its own connections, recorder and hold store (its own database). So a triggerer sets
its runtime with :func:`use_kafka_runtime`, in the context of its own task: every task it
starts (the groups, their supervisors) inherits it, and no other triggerer sees it.
:func:`configure_kafka_runtime` sets the process's runtime, used outside any triggerer
(tests, tools).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from sharedstream.core.holds import HoldStore
from sharedstream.kafka.rejections import RejectionRecorder
from sharedstream.kafka.topic_ids import TopicIdResolver


@dataclass(frozen=True, slots=True)
class KafkaRuntime:
    connections: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    recorder: RejectionRecorder | None = None
    environ: Mapping[str, str] | None = None  # None: os.environ at resolution time
    topic_id_resolver: TopicIdResolver | None = None  # None: describe_topic_ids
    holds: HoldStore | None = None  # where watchers' holds survive a crash (core/holds.py)


_runtime = KafkaRuntime()
_scoped: ContextVar[KafkaRuntime | None] = ContextVar("sharedstream_kafka_runtime",
                                                      default=None)


def configure_kafka_runtime(
    connections: Mapping[str, Mapping[str, Any]],
    recorder: RejectionRecorder | None,
    environ: Mapping[str, str] | None = None,
    topic_id_resolver: TopicIdResolver | None = None,
    holds: HoldStore | None = None,
) -> None:
    """Set the process's connections table, rejection recorder and hold store (used
    where no triggerer set its own with :func:`use_kafka_runtime`)."""
    global _runtime
    _runtime = KafkaRuntime(dict(connections), recorder, environ, topic_id_resolver, holds)


def use_kafka_runtime(runtime: KafkaRuntime) -> None:
    """Set ``runtime`` for the current context: the calling task and the tasks and
    worker threads (``asyncio.to_thread``) it starts from now on."""
    _scoped.set(runtime)


def kafka_runtime() -> KafkaRuntime:
    """The runtime of the current context's triggerer, else the process's."""
    return _scoped.get() or _runtime
