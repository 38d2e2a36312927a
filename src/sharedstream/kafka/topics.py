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

from sharedstream.kafka.connections import ConnectionConfigError, client_config


class BrokerUnreachableError(RuntimeError):
    """The brokers of a connection did not answer a metadata request in time: a runtime
    failure (exit 1), which a supervisor may retry, not a configuration error."""


def missing_topics(connection_id: str, config: Mapping[str, Any], topics: Iterable[str],
                   timeout: float = 15.0) -> list[str]:
    """The subset of ``topics`` the cluster does not have, sorted.

    Raises :class:`ConnectionConfigError` for a setting librdkafka refuses (an unknown
    key, a bad value) and :class:`BrokerUnreachableError` naming the bootstrap servers
    when none answers within ``timeout`` seconds.
    """
    try:
        admin = AdminClient(client_config(config))
    except KafkaException as exc:
        raise ConnectionConfigError(
            f"connection {connection_id!r}: {exc.args[0].str() if exc.args else exc} "
            f"(fix it in [connections.{connection_id}] or the environment)") from None
    try:
        existing = admin.list_topics(timeout=timeout).topics
    except KafkaException as exc:
        raise BrokerUnreachableError(
            f"connection {connection_id!r}: no broker of {config.get('bootstrap.servers')} "
            f"answered within {timeout:g}s ({exc.args[0].str() if exc.args else exc}); check "
            "bootstrap.servers and the network ([triggerer] broker_timeout waits longer)"
        ) from None
    return sorted(t for t in set(topics) if t not in existing)
