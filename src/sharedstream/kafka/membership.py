"""Static group membership (KIP-345): how a restarted consumer takes its partitions back.

A consumer that dies without leaving its group (kill -9, an OOM kill, a node lost) keeps
its partitions at the broker until its session times out (``session.timeout.ms``, 45 s
by default): a process started in its place waits that long, consuming nothing. A
*static* member has a ``group.instance.id``; when a consumer joins with the id of a
member still in the group, the broker hands it that member's partitions at once, with
no rebalance. The triggerer derives one id per consumer group from a stable identity of
the process (``sharedstream.triggerer.identity``) and hands them over as a
:class:`StaticMembership`; this module applies them to a consumer's configuration.

* A connection that sets ``group.instance.id`` itself keeps it (every group on that
  connection then uses it).
* Under the consumer protocol (``group.protocol=consumer``, KIP-848) no id is derived: a
  static member restarted after a kill -9 is refused there (``UNRELEASED_INSTANCE_ID``)
  until the old member's session expires, which is worse than joining afresh.
* Two live consumers with one id in one group: the broker *fences* the older one (a
  fatal error, :class:`InstanceFencedError`). librdkafka reports the same when a member
  fences *itself*: after a lost session (a broker restart, a network cut) it rejoins
  under a new member id, and a request still in flight under the old one is answered
  "fenced". So one fence only rebuilds the group (a new consumer, the same id); a second
  fence of the group within ``FENCE_WINDOW_S`` (:class:`FenceWatch`) means another live
  process holds the identity, and the process stops with an error naming the setting
  that gives each its own, instead of the two fencing each other for ever.
* Leaving: librdkafka never sends LeaveGroup for a static member that closes, so its
  partitions would idle for the session timeout if it does not come back (a scale-down,
  a pod replaced under a new name). With ``leave_on_close`` the consumer unsubscribes
  before it closes, which leaves the group (see ``kafka/rebalance.py``); the next start
  joins afresh, at the cost of one rebalance.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError

INSTANCE_ID = "group.instance.id"
# librdkafka's text for FENCED_INSTANCE_ID (rd_kafka_err2str), inside the _FATAL error a
# fenced consumer reports: the Python client does not expose the underlying code.
_FENCED_TEXT = "static consumer fenced"


# Two fences of one group within this long: another live process has its identity.
FENCE_WINDOW_S = 60.0


class InstanceFencedError(RuntimeError):
    """The broker fenced this consumer's ``group.instance.id``: another live consumer
    joined with it, or this one's own stale request after a lost session (see the
    module doc). The message says which setting gives each process its own."""

    def __init__(self, message: str, consumer_group: str, instance_id: str) -> None:
        super().__init__(message)
        self.consumer_group = consumer_group
        self.instance_id = instance_id


class FenceWatch:
    """Tells a group fenced by its own stale request from one fenced by a twin: a second
    fence of the group within ``window`` seconds of the first (see the module doc)."""

    def __init__(self, window: float = FENCE_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._window = window
        self._clock = clock
        self._last: dict[str, tuple[float, InstanceFencedError]] = {}

    def twin(self, fence: InstanceFencedError) -> bool:
        """Whether ``fence`` is the group's second within the window. Every watcher of the
        group reports the same fence: it counts once."""
        now = self._clock()
        last = self._last.get(fence.consumer_group)
        if last is not None and last[1] is fence:
            return False
        self._last[fence.consumer_group] = (now, fence)
        return last is not None and now - last[0] < self._window


@dataclass(frozen=True, slots=True)
class StaticMembership:
    """The ``group.instance.id`` of each consumer group this process consumes, and where
    it comes from (named in the error when two processes claim one)."""

    instance_ids: Mapping[str, str] = field(default_factory=dict)
    source: str = "[triggerer] instance_name"
    leave_on_close: bool = True

    def instance_id(self, consumer_group: str, config: Mapping[str, Any]) -> str | None:
        """The id a consumer of ``consumer_group`` on connection ``config`` joins with:
        the connection's own, else the derived one (none under the consumer protocol)."""
        own = config.get(INSTANCE_ID)
        if own:
            return str(own)
        if is_consumer_protocol(config):
            return None
        return self.instance_ids.get(consumer_group)

    def origin(self, config: Mapping[str, Any]) -> str:
        """What sets the id on this connection, for the error's fix."""
        if config.get(INSTANCE_ID):
            return "the connection's group.instance.id"
        return self.source


def is_consumer_protocol(config: Mapping[str, Any]) -> bool:
    return str(config.get("group.protocol", "classic")).lower() == "consumer"


def is_fatal(error: KafkaError) -> bool:
    """A consumer error after which the client cannot go on. A fenced consumer's error
    arrives from ``consume()`` as ``_FATAL`` with ``fatal()`` False."""
    return bool(error.fatal()) or error.code() == KafkaError._FATAL


def fenced(error: KafkaError) -> bool:
    return error.code() == KafkaError.FENCED_INSTANCE_ID or (
        is_fatal(error) and _FENCED_TEXT in error.str().lower())


def fenced_error(consumer_group: str, instance_id: str, origin: str) -> InstanceFencedError:
    fix = ("give each process its own group.instance.id in its connection"
           if origin.startswith("the connection") else
           "give each process its own [triggerer] instance_name "
           "(SHAREDSTREAM__TRIGGERER__INSTANCE_NAME)")
    return InstanceFencedError(
        f"group {consumer_group}: another live process joined with this process's "
        f"group.instance.id {instance_id!r} (from {origin}), so the broker fenced this "
        f"one (twice within {FENCE_WINDOW_S:g}s): {fix}, or turn static membership off "
        "with [triggerer] static_membership = false", consumer_group, instance_id)
