"""``sharedstream.toml``: the whole configuration, loaded and validated at start-up.

Sections: ``[database] url``, ``[triggerer]`` (the shared-stream manager's knobs
plus the process's own), ``[state_store]``, ``[workers]`` and
``[connections.<id>]`` (librdkafka dicts, checked by the Kafka producer room),
``[airflow.<name>]`` (Airflow instances of the asset bridge, ``sharedstream.airflowbridge``),
``[destinations.<id>]`` (where asset events are delivered, ``sharedstream.delivery``),
``[schema_registries.<id>]`` (schema registry clients, ``sharedstream.serde.registries``).
Every option can be overridden with ``SHAREDSTREAM__<SECTION>__<KEY>``.

Everything is validated before any consumer or database connection exists: an
invalid option is a :class:`ConfigError` naming the key and the file, and the CLI
exits with code 2.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sharedstream.airflowbridge.settings import AirflowInstanceSettings
from sharedstream.core.streamconfig import ManagerSettings
from sharedstream.delivery.settings import (
    OPTION_TYPES,
    AirflowDestination,
    CommonOptions,
    DestinationSettings,
)
from sharedstream.statestore.settings import StateStoreSettings
from sharedstream.triggerer.settings_loader import (
    ConfigError,
    Source,
    build_section,
    env_overrides,
    read_toml,
    suggestion,
    unknown_option,
)
from sharedstream.uow.settings import BATCH_SIZE, MAX_DELAY

DEFAULT_DATABASE_URL = "sqlite:///sharedstream.db"
# Kafka's characters for a group.instance.id (up to 249; room left for a suffix).
INSTANCE_NAME = re.compile(r"[A-Za-z0-9._-]{0,200}")
CONFIG_ENV = "SHAREDSTREAM_CONFIG"

__all__ = ["Config", "ConfigError", "load_config"]


@dataclass(frozen=True, slots=True)
class DatabaseSettings:
    """``[database]``: where events and state live (any SQLAlchemy URL).

    * ``url``: SQLAlchemy URL of the database that holds events, state and the
      triggerer's records: ``postgresql+psycopg://...``, ``mysql+pymysql://...`` or
      ``sqlite:///...``. It may hold a password: it is never printed.
    """

    url: str = DEFAULT_DATABASE_URL

    def __post_init__(self) -> None:
        if not self.url.strip():
            raise ValueError("url must not be empty")


@dataclass(frozen=True, slots=True)
class ProcessSettings:
    """The process's own ``[triggerer]`` options (the manager's are in ManagerSettings).

    * ``shutdown_timeout``: seconds SIGTERM waits for in-flight work before exiting.
    * ``health_host`` / ``health_port``: where ``/livez``, ``/readyz``, ``/metrics``
      are served (loopback by default; port 0 picks a free one; -1 disables).
    * ``uow_batch_size`` / ``uow_max_delay``: a unit-of-work transaction holds at most
      this many windows; it starts as soon as the writer is free (group commit: what
      arrived during the previous transaction forms the next), unless its oldest window
      is younger than ``uow_max_delay`` seconds and the batch is not full (0, the
      default: never wait).
    * ``broker_timeout``: how long start-up waits for each connection's brokers to
      answer (seconds); then it exits 1 naming them, so a supervisor retries.
    * ``loop_block_timeout``: seconds the event loop may be held by one step (a filter
      that blocks instead of awaiting) before ``/readyz`` reports it; a warning naming
      the watcher is logged from 1 s (or this bound, if less).
    * ``progress_interval``: seconds between the log's progress lines (one per group:
      messages/s, events/s, lag, held, dead-lettered since the previous line), so a
      quiet stream can be told from a stuck one; 0 turns them off.
    * ``static_membership``: join each consumer group as a static member (KIP-345, a
      ``group.instance.id`` per group), so a process restarted after a crash takes its
      partitions back at once instead of after the dead member's session timeout
      (``session.timeout.ms``, 45 s by default). A connection's own
      ``group.instance.id`` is kept; none is derived under ``group.protocol =
      "consumer"``.
    * ``instance_name``: the stable name the ids are made of (letters, digits, ``.``,
      ``_``, ``-``): one per process, the same across its restarts. Empty (the
      default): the host name and a slot number that stays the same for a process
      restarted on the host (so the ids of two processes of one module on one host
      differ). The Helm chart sets the pod name.
    * ``leave_group_on_shutdown``: after SIGTERM's final commit, leave the groups, so
      their partitions go to the other members at once. Without it (a static member
      never leaves by itself) a process that does not come back, a scale-down or a
      pod replaced under a new name, leaves its partitions unread for the session
      timeout; with it, a clean restart costs one rebalance.
    """

    shutdown_timeout: float = 30.0
    health_host: str = "127.0.0.1"
    health_port: int = 8794
    uow_batch_size: int = BATCH_SIZE
    uow_max_delay: float = MAX_DELAY
    broker_timeout: float = 15.0
    loop_block_timeout: float = 10.0
    progress_interval: float = 60.0
    static_membership: bool = True
    instance_name: str = ""
    leave_group_on_shutdown: bool = True

    def __post_init__(self) -> None:
        if not INSTANCE_NAME.fullmatch(self.instance_name):
            raise ValueError("instance_name may hold only letters, digits, '.', '_' and "
                             "'-' (at most 200), as Kafka's group.instance.id")
        if not self.progress_interval >= 0:
            raise ValueError("progress_interval must be >= 0 (0 turns the progress lines off)")
        if not self.loop_block_timeout > 0:
            raise ValueError("loop_block_timeout must be > 0")
        if not self.broker_timeout > 0:
            raise ValueError("broker_timeout must be > 0")
        if not self.shutdown_timeout > 0:
            raise ValueError("shutdown_timeout must be > 0")
        if not -1 <= self.health_port <= 65535:
            raise ValueError("health_port must be -1 (off), 0 (any free port) or a port number")
        if self.uow_batch_size < 1:
            raise ValueError("uow_batch_size must be >= 1")
        if not self.uow_max_delay >= 0:
            raise ValueError("uow_max_delay must be >= 0")


@dataclass(frozen=True, slots=True)
class WorkersSettings:
    """``[workers]``: where large state payloads live (a backend dotted path and its dir).

    * ``state_backend``: keep task-state values outside the database, the row keeping
      a reference: ``filesystem``, or the dotted path of a ``PayloadBackend``
      subclass. Unset, values stay in the database. Asset state always does.
    * ``state_dir``: directory of the ``filesystem`` backend (unset:
      ``./sharedstream-state``).
    """

    state_backend: str | None = None
    state_dir: str | None = None


@dataclass(frozen=True, slots=True)
class WebSettings:
    """``[web]``: the console (``sharedstream web``).

    * ``token``: the bearer token (or basic-auth password) the console requires; it must
      be set when the console binds anything but loopback. Prefer the environment,
      ``SHAREDSTREAM__WEB__TOKEN``, to the file.
    * ``status_networks``: the networks (CIDRs) a triggerer's ``/status`` may be fetched
      from; a ``status_url`` whose host resolves outside them is not fetched. Loopback
      by default; add the triggerers' network when they serve health elsewhere.
    * ``operate_tokens``: ``{name: token}``, the tokens allowed to act (retry, replay,
      reset, forget); the audit names who acted by the name. Prefer
      ``SHAREDSTREAM__WEB__OPERATE_TOKENS`` (an inline table, ``{alice = "..."}``) to the
      file.
    """

    token: str | None = field(default=None, repr=False)
    operate_tokens: dict[str, str] = field(default_factory=dict, repr=False)
    status_networks: list[str] = field(default_factory=lambda: ["127.0.0.0/8", "::1/128"])

    def __post_init__(self) -> None:
        parse_networks(self.status_networks)


def parse_networks(texts: list[str]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network,
                                              ...]:
    """``[web] status_networks`` as networks (host bits allowed: ``10.0.0.1/8``)."""
    if not all(isinstance(text, str) for text in texts):
        raise ValueError("status_networks must be a list of CIDR strings")
    try:
        return tuple(ipaddress.ip_network(text, strict=False) for text in texts)
    except ValueError as exc:
        raise ValueError(f"status_networks: {exc} (give CIDRs such as \"10.0.0.0/8\")"
                         ) from None


@dataclass(frozen=True, slots=True)
class Config:
    """The loaded configuration. ``path`` is None when only defaults/env were used."""

    path: Path | None = None
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    manager: ManagerSettings = field(default_factory=ManagerSettings)
    process: ProcessSettings = field(default_factory=ProcessSettings)
    state_store: StateStoreSettings = field(default_factory=StateStoreSettings)
    connections: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    airflow: Mapping[str, AirflowInstanceSettings] = field(default_factory=dict)
    destinations: Mapping[str, DestinationSettings] = field(default_factory=dict)
    schema_registries: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    web: WebSettings = field(default_factory=WebSettings)


_SECTIONS = ("database", "triggerer", "state_store", "workers", "connections", "airflow",
             "destinations", "web", "schema_registries")


def load_config(path: str | Path | None = None, env: Mapping[str, str] | None = None, *,
                secrets: bool = True) -> Config:
    """Load ``path`` (or ``$SHAREDSTREAM_CONFIG``, or ``./sharedstream.toml`` if present).

    An explicitly named file must exist; the implicit ``./sharedstream.toml`` is
    optional, so a first run works with defaults only. ``secrets=False`` is for commands
    that only read the state store: the tables that hold other systems' credentials
    (``[airflow.<name>]``, ``[destinations.<id>]``) are left out, unread, so such a
    command runs where those secrets are not set.
    """
    environ = os.environ if env is None else env
    chosen = path if path is not None else environ.get(CONFIG_ENV)
    if chosen is not None:
        file_path: Path | None = Path(chosen)
        raw = read_toml(Path(chosen))
    elif Path("sharedstream.toml").is_file():
        file_path = Path("sharedstream.toml")
        raw = read_toml(file_path)
    else:
        file_path, raw = None, {}
    return _build(raw, file_path, env_overrides(environ, _SECTIONS), secrets)


def _build(raw: Mapping[str, Any], path: Path | None,
           overrides: Mapping[str, Mapping[str, Any]], secrets: bool = True) -> Config:
    source = Source(path)
    where = str(path) if path is not None else "built-in defaults"
    for section in raw:
        if section not in _SECTIONS:
            fixed = suggestion(section, _SECTIONS)
            hint = f"did you mean [{fixed}]? " if fixed else ""
            raise ConfigError(f"[{section}] in {where}: unknown section "
                              f"({hint}known: {', '.join(_SECTIONS)})")
    for section, value in raw.items():
        if not isinstance(value, dict):
            raise ConfigError(f"{section} in {where}: expected a [{section}] table")

    def values(section: str) -> tuple[dict[str, Any], frozenset[str]]:
        merged = dict(raw.get(section, {}))
        env_values = overrides.get(section, {})
        merged.update(env_values)
        return merged, frozenset(env_values)

    database = build_section(DatabaseSettings, "database", *_with_source(values("database"),
                                                                         source))
    manager, process = _triggerer(values("triggerer"), source)
    workers = build_section(WorkersSettings, "workers", *_with_source(values("workers"), source))
    state_values, state_env = values("state_store")
    state_store = build_section(StateStoreSettings, "state_store",
                                {**state_values, "payload_backend": workers.state_backend,
                                 "payload_dir": workers.state_dir}, source, state_env)
    connections = raw.get("connections", {})
    if "connections" in overrides:
        raise ConfigError("connections come from [connections.<id>] tables or "
                          "SHAREDSTREAM_CONN_<ID> (JSON), not SHAREDSTREAM__CONNECTIONS__*")
    for conn_id, conn in connections.items():
        if not isinstance(conn, dict):
            raise ConfigError(f"[connections.{conn_id}] in {where}: expected a table of "
                              'librdkafka options ("bootstrap.servers" = "...")')
    registries = raw.get("schema_registries", {})
    if "schema_registries" in overrides:
        raise ConfigError("schema registries come from [schema_registries.<id>] tables or "
                          "SHAREDSTREAM_SCHEMA_REGISTRY_<ID>__<KEY>, not "
                          "SHAREDSTREAM__SCHEMA_REGISTRIES__*")
    for registry_id, registry in registries.items():
        if not isinstance(registry, dict):
            raise ConfigError(f"[schema_registries.{registry_id}] in {where}: expected a table "
                              'of schema registry client options (url = "http://...")')
    airflow = _airflow_instances(raw.get("airflow", {}), overrides, source) if secrets else {}
    web = build_section(WebSettings, "web", *_with_source(values("web"), source))
    return Config(path=path, database=database, manager=manager, process=process, web=web,
                  state_store=state_store, connections=connections,
                  schema_registries=registries, airflow=airflow,
                  destinations=_destinations(raw.get("destinations", {}), overrides, source,
                                             airflow) if secrets else {})


def _airflow_instances(tables: Mapping[str, Any], overrides: Mapping[str, Mapping[str, Any]],
                       source: Source) -> dict[str, AirflowInstanceSettings]:
    """``[airflow.<name>]`` tables, each key overridable from the environment
    (``SHAREDSTREAM__AIRFLOW__<NAME>__<KEY>``); errors name the key, never a value."""
    if "airflow" in overrides:
        raise ConfigError("Airflow instances come from [airflow.<name>] tables or "
                          "SHAREDSTREAM__AIRFLOW__<NAME>__<KEY>, not SHAREDSTREAM__AIRFLOW__*")
    from_env = _tables_from_env("airflow", overrides)
    instances = {}
    for name in sorted({*tables, *from_env}):
        table = tables.get(name, {})
        if not isinstance(table, dict):
            raise ConfigError(f"[airflow.{name}] in {source.path}: expected a table")
        merged = {**table, **from_env.get(name, {})}
        for given, needed in (("username", "password"), ("password", "username")):
            if given in merged and needed not in merged:
                raise source.missing(f"airflow.{name}", needed,
                                     " (username and password go together)")
        instances[name] = build_section(AirflowInstanceSettings, f"airflow.{name}", merged,
                                        source, frozenset(from_env.get(name, {})))
    return instances


def _tables_from_env(section: str, overrides: Mapping[str, Mapping[str, Any]]
                     ) -> dict[str, Mapping[str, Any]]:
    """``{table: {key: value}}`` of the ``SHAREDSTREAM__<SECTION>__<TABLE>__<KEY>`` variables."""
    return {name.split(".", 1)[1]: values for name, values in overrides.items()
            if name.startswith(section + ".")}


def _destinations(tables: Mapping[str, Any], overrides: Mapping[str, Mapping[str, Any]],
                  source: Source, airflow: Mapping[str, AirflowInstanceSettings]
                  ) -> dict[str, DestinationSettings]:
    """``[destinations.<id>]`` tables, each key overridable from the environment."""
    where = str(source.path) if source.path is not None else "built-in defaults"
    if "destinations" in overrides:
        raise ConfigError("destination options come from [destinations.<id>] tables or "
                          "SHAREDSTREAM__DESTINATIONS__<ID>__<KEY>")
    from_env = _tables_from_env("destinations", overrides)
    destinations = {}
    for dest_id in sorted({*tables, *from_env}):
        table = tables.get(dest_id, {})
        if not isinstance(table, dict):
            raise ConfigError(f"[destinations.{dest_id}] in {where}: expected a table")
        section = f"destinations.{dest_id}"
        merged = {**table, **from_env.get(dest_id, {})}
        env_keys = frozenset(from_env.get(dest_id, {}))
        common_keys = {f.name for f in dataclasses.fields(CommonOptions)}
        if "kind" not in merged:
            raise ConfigError(f"[{section}] in {where}: missing kind "
                              "(airflow, webhook or kafka)")
        common = build_section(CommonOptions, section,
                               {k: v for k, v in merged.items() if k in common_keys},
                               source, env_keys)
        options = build_section(OPTION_TYPES[common.kind], section,
                                {k: v for k, v in merged.items() if k not in common_keys},
                                source, env_keys)
        if isinstance(options, AirflowDestination) and options.instance not in airflow:
            raise ConfigError(f"[{section}] in {where}: instance {options.instance!r} has no "
                              f"[airflow.{options.instance}] section")
        destinations[dest_id] = DestinationSettings(dest_id, common, options)
    return destinations


def _with_source(merged_env: tuple[dict[str, Any], frozenset[str]],
                 source: Source) -> tuple[dict[str, Any], Source, frozenset[str]]:
    merged, env_keys = merged_env
    return merged, source, env_keys


def _triggerer(merged_env: tuple[dict[str, Any], frozenset[str]],
               source: Source) -> tuple[ManagerSettings, ProcessSettings]:
    """Split ``[triggerer]`` between the manager's knobs and the process's own."""
    merged, env_keys = merged_env
    manager_keys = {f.name for f in dataclasses.fields(ManagerSettings)}
    process_keys = {f.name for f in dataclasses.fields(ProcessSettings)}
    for key in merged:
        if key not in manager_keys | process_keys:
            raise unknown_option("triggerer", key, manager_keys | process_keys, source,
                                 from_env=key in env_keys)
    manager = build_section(ManagerSettings, "triggerer",
                            {k: v for k, v in merged.items() if k in manager_keys}, source,
                            env_keys)
    process = build_section(ProcessSettings, "triggerer",
                            {k: v for k, v in merged.items() if k in process_keys}, source,
                            env_keys)
    return manager, process
