"""The tests' Kafka producer: idempotent, so a send librdkafka retries is neither written
twice nor overtaken by the sends after it.

Tests work out where their messages landed from the order they produced them in (the
n-th message of a partition at offset n) and compare what the watchers stored with
that. A plain producer breaks it now and then: a broker that has just become a
partition's leader can refuse the first request (NOT_LEADER_OR_FOLLOWER), librdkafka
sends it again, and without idempotence the requests sent meanwhile are stored first.
The routed-watchers test failed once that way in CI: a partition's first three messages
were stored behind the next three. An idempotent producer keeps the order on retry
(its first send waits about half a second for a producer id).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import Producer


def ordered_producer(bootstrap: str, config: Mapping[str, Any] | None = None) -> Producer:
    """A producer to ``bootstrap`` (``config`` added) whose retries keep the order."""
    return Producer({"bootstrap.servers": bootstrap, **(config or {}),
                     "enable.idempotence": True})
