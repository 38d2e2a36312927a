"""The start-up plan: what the triggerer will run, checked before it touches Kafka or a database.

Building the plan loads the watcher module, groups the watchers by shared-stream
key, checks that the triggers of each group agree, and resolves every Kafka
connection (auto-commit refused, defaults applied). Any problem here is a
:class:`StartupError` and exit code 2: nothing has connected anywhere yet.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sharedstream.kafka.connections import (
    DEFAULT_GROUP_ID,
    ConnectionConfigError,
    consumer_group_id,
    resolve_connection,
)
from sharedstream.kafka.group_start import group_topics
from sharedstream.serde.registries import RegistryConfigError, resolve_registry
from sharedstream.triggerer.config import Config
from sharedstream.triggerer.loading import (
    LoadedWatcher,
    WatcherLoadError,
    WatcherModule,
    load_watchers,
)
from sharedstream.triggerer.registration import GroupDeclaration
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger


class StartupError(RuntimeError):
    """The triggerer cannot start as configured; the CLI prints it and exits with code 2."""


class UnavailableError(RuntimeError):
    """A service the process needs (broker, database) does not answer; the CLI prints it
    and exits 1, a runtime failure a supervisor may retry (unlike a configuration error)."""


@dataclass(frozen=True, slots=True)
class GroupPlan:
    """One shared-stream group: its key, members, consumer group and Kafka needs."""

    key: Hashable
    members: tuple[LoadedWatcher, ...]
    consumer_group: str
    connection_id: str | None = None
    connection: dict[str, Any] = field(default_factory=dict)
    topics: tuple[str, ...] = ()

    @property
    def watchers(self) -> frozenset[str]:
        return frozenset(m.name for m in self.members)

    @property
    def consumed_topics(self) -> tuple[str, ...]:
        """The topics its consumer subscribes to: those its group name declares."""
        base = str(self.connection.get("group.id") or DEFAULT_GROUP_ID)
        return tuple(group_topics(self.consumer_group, base)) if self.connection_id else ()

    def declaration(self) -> GroupDeclaration:
        return GroupDeclaration(self.key, self.consumer_group, self.watchers)


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything the process runs: shared-stream groups and stand-alone triggers."""

    config: Config
    source: str
    watchers: tuple[LoadedWatcher, ...]
    groups: tuple[GroupPlan, ...]
    standalone: tuple[LoadedWatcher, ...]


def make_plan(config: Config, targets: str | Sequence[str]) -> Plan:
    """Load the watcher modules (files, module paths, folders) and check them against
    ``config``; raise StartupError on any problem."""
    if isinstance(targets, str):
        targets = [targets]
    try:
        module = load_watchers(targets)
    except WatcherLoadError as exc:
        raise StartupError(str(exc)) from None
    return plan_of(config, module)


def plan_of(config: Config, module: WatcherModule) -> Plan:
    """The plan of assets already loaded and checked (a module, or the embedded API's)."""
    watchers = tuple(module.watchers())
    by_key: dict[Hashable, list[LoadedWatcher]] = {}
    standalone: list[LoadedWatcher] = []
    for loaded in watchers:
        key = loaded.trigger.shared_stream_key()
        if key is None:
            standalone.append(loaded)
        else:
            by_key.setdefault(key, []).append(loaded)
    groups = tuple(_group_plan(config, key, members) for key, members in by_key.items())
    return Plan(config=config, source=module.source, watchers=watchers, groups=groups,
                standalone=tuple(standalone))


def _check_registries(config: Config, members: list[LoadedWatcher]) -> None:
    """Every schema registry a member's deserialiser names must be configured: unchecked,
    a typo in ``registry=`` would hold every framed message for ever (the registry being
    "unavailable"), where only the configuration can fix it."""
    for loaded in members:
        registry = getattr(getattr(loaded.trigger, "value_deserializer", None), "registry", None)
        if not isinstance(registry, str):
            continue
        try:
            resolve_registry(registry, config.schema_registries)
        except RegistryConfigError as exc:
            raise StartupError(f"watcher {loaded.name!r}: {exc}") from None


def _group_plan(config: Config, key: Hashable, members: list[LoadedWatcher]) -> GroupPlan:
    first = members[0].trigger
    if not isinstance(first, KafkaSharedStreamTrigger):
        return GroupPlan(key=key, members=tuple(members), consumer_group=repr(key))
    try:
        connection = resolve_connection(first.kafka_config_id, config.connections)
    except ConnectionConfigError as exc:
        raise StartupError(f"watcher {members[0].name!r}: {exc}") from None
    _check_registries(config, members)
    topics = list(first.topics)
    if first.dlq_topic is not None:
        topics.append(first.dlq_topic)
    return GroupPlan(key=key, members=tuple(members),
                     consumer_group=consumer_group_id(connection, first.topics),
                     connection_id=first.kafka_config_id, connection=connection,
                     topics=tuple(topics))
