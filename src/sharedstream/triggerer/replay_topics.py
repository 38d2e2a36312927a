"""Start-up: the replay topic of every dead-letter topic the groups write to.

``run`` creates a missing one (see ``kafka/replay_topic.py``) before any consumer
subscribes to it, so a refusal is one ``error:`` line at start-up rather than a group
failing later; ``check`` reports each without creating it.
"""

from __future__ import annotations

from collections.abc import Sequence

from sharedstream.kafka.replay_topic import ReplayTopicError, ensure_replay_topic, find_replay_topic
from sharedstream.kafka.topics import BrokerUnreachableError
from sharedstream.triggerer.plan import GroupPlan, StartupError, UnavailableError
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger


def replay_topics(groups: Sequence[GroupPlan], *, create: bool, timeout: float) -> list[str]:
    """One line per replay topic (once per connection and dead-letter topic): present,
    created, or (``create`` False) missing and what ``run`` will create."""
    lines: list[str] = []
    done: set[tuple[str, str]] = set()
    for group in groups:
        trigger = group.members[0].trigger
        if (group.connection_id is None or not isinstance(trigger, KafkaSharedStreamTrigger)
                or trigger.dlq_topic is None
                or (group.connection_id, trigger.dlq_topic) in done):
            continue
        done.add((group.connection_id, trigger.dlq_topic))
        look = ensure_replay_topic if create else find_replay_topic
        try:
            lines.append(look(group.connection, trigger.dlq_topic, timeout).describe())
        except ReplayTopicError as exc:
            raise StartupError(f"connection {group.connection_id!r}: {exc}") from None
        except BrokerUnreachableError as exc:
            raise UnavailableError(f"connection {group.connection_id!r}: {exc}") from None
    return lines
