"""Start-up check that every watched topic and dead-letter topic exists.

Topic auto-creation would turn a typo into an empty topic that a watcher waits
on forever, and a missing dead-letter topic would hold every rejected message;
so the triggerer refuses to start and names every missing topic at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from sharedstream.kafka.connections import client_config


class BrokerUnreachableError(RuntimeError):
    """The broker of a connection did not answer a metadata request in time."""


def missing_topics(connection_id: str, config: Mapping[str, Any], topics: Iterable[str],
                   timeout: float = 15.0) -> list[str]:
    """The subset of ``topics`` the cluster does not have, sorted."""
    admin = AdminClient(client_config(config))
    try:
        existing = admin.list_topics(timeout=timeout).topics
    except KafkaException as exc:
        raise BrokerUnreachableError(
            f"connection {connection_id!r}: broker did not answer within {timeout:g}s "
            f"({exc.args[0].str() if exc.args else exc})") from None
    return sorted(t for t in set(topics) if t not in existing)
