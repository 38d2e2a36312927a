"""The tests' Kafka producer: idempotent, so a send librdkafka retries is neither written
twice nor overtaken by the sends after it.

Tests work out where their messages landed from the order they produced them in (the
n-th message of a partition at offset n) and compare what the watchers stored with
that. A plain producer breaks it now and then: a broker that has just become a
partition's leader can refuse the first request (NOT_LEADER_OR_FOLLOWER), librdkafka
sends it again, and without idempotence the requests sent meanwhile are stored first.
The routed-watchers test failed that way in CI: a partition's first messages were stored
behind the next ones. An idempotent producer keeps the order on retry.

Its first send waits about half a second for a producer id, so helpers that produce in
many small rounds (traffic racing rebalances) take :func:`session_producer`, one per
broker for the whole session: with a new producer per round, a commit-failure test's
traffic slowed to a round per half second and no longer met a rebalance mid-commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import Producer

_session: dict[str, Producer] = {}


def ordered_producer(bootstrap: str, config: Mapping[str, Any] | None = None) -> Producer:
    """A new producer to ``bootstrap`` (``config`` added) whose retries keep the order."""
    return Producer({"bootstrap.servers": bootstrap, **(config or {}),
                     "enable.idempotence": True})


def session_producer(bootstrap: str) -> Producer:
    """The session's ordered producer to ``bootstrap`` (made on first use). Thread-safe to
    produce from; its ``flush`` also waits for what other threads sent through it."""
    producer = _session.get(bootstrap)
    if producer is None:
        producer = _session[bootstrap] = ordered_producer(bootstrap)
    return producer
