"""Kafka connections: where a ``kafka_config_id`` comes from and what it may contain.

A connection is a librdkafka config dict, assembled from these sources, each later
one winning key by key (the environment always wins over the file):

1. the config file's ``[connections.<id>]`` table;
2. ``AIRFLOW_CONN_<ID>``, when set: an Airflow connection's JSON
   (``{"conn_type": "kafka", "extra": {...librdkafka keys...}}``), so a connection an
   Airflow deployment already injects is reused as it is;
3. ``SHAREDSTREAM_CONN_<ID>``: a JSON object of librdkafka keys (or the same Airflow
   shape);
4. ``SHAREDSTREAM_CONN_<ID>__<KEY>``, one variable per key, the key's dots written as
   underscores: ``SHAREDSTREAM_CONN_KAFKA_DEFAULT__SASL_PASSWORD`` sets
   ``sasl.password``. A secret never has to sit in the file or share a variable.

Validation happens here, before any consumer exists, so a misconfigured connection
never reads a single message:

* ``bootstrap.servers``: the one key a connection must have.
* ``group.id``: the prefix of every consumer group on the connection: each topic
  set consumes as ``<group.id>.<sorted topics joined by "+">``
  (:func:`consumer_group_id`), so two topic sets never split one group's partitions.
* ``enable.auto.commit``: absent -> forced false. Present and anything but the
  boolean ``False`` or the string ``"false"`` (any case) -> refused. librdkafka
  committing on its own would move offsets past messages whose events are not
  persisted yet (guarantee 1), so there is no "close enough" value: ``0`` and
  ``"0"`` are refused too.
* ``enable.auto.offset.store``: always false; offsets move only through
  explicit commits of the resolved prefix.
* ``auto.offset.reset``: absent -> ``earliest``, so a new group starts from the
  beginning instead of silently skipping what was written before it existed.
* ``fetch.queue.backoff.ms``: absent -> 100 (librdkafka's own default is 1000). Once
  a partition's prefetch queue is over its thresholds (``queued.min.messages``,
  ``queued.max.messages.kbytes``), librdkafka waits this long before fetching for it
  again. On a backlog the consumer drains that queue well within a second and then,
  with 1000, waits out the rest of it with nothing to hand to the watchers. In three
  runs 10, 50 and 100 were equally fast and 1000 the slowest; 100 wakes librdkafka up
  least of the three (measured: ``docs/performance.md``, issue 27).
* ``reconnect.backoff.ms``: absent -> 25 (librdkafka's own default is 100). librdkafka
  waits about half of it before its first connection to each broker the metadata names,
  not only before a reconnection: every new client (the start-up checks, the consumer's
  coordinator, the dead-letter producer) paid about 50 ms of it before its first
  request there, a fifth of ``sharedstream run``'s start-up; with 25 a consumer joins
  in 17 ms instead of 55 (10 is no faster). The cost: against a broker that is down,
  librdkafka tries about 75 times a second instead of 20 (measured: ``bench/startup.py``,
  issue 43); the consumer's ``broker error`` warnings are held back to one a minute.
* ``oauth_cb``: the dotted path of a function (``"mycompany.kafka.msk_iam_token"``),
  imported here and handed to librdkafka as its OAUTHBEARER token callback (MSK IAM,
  OIDC): a function cannot be written in TOML or an environment variable.

Every client sharedstream builds from a connection also sets, unless it does:

* ``logger``: librdkafka's log lines go through Python logging, as the logger
  ``sharedstream.librdkafka`` (repeats held back; see ``sharedstream.kafka.logs``),
  instead of raw lines on stderr.

The dead-letter producer (:func:`producer_config`) sets, unless the connection does:

* ``enable.idempotence``: true, so librdkafka's own retries never write a record twice.
* ``acks``: ``all``, so a delivery report means the record is durable on the
  broker; only then is the rejected message committed past.
* ``message.timeout.ms``: how long one dead-letter send may take before it is
  reported failed; the message stays held and the send is retried with backoff.

Secrets (passwords, tokens, key material) never appear in errors or logs; use
:func:`redacted` before printing a config.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sharedstream.kafka.logs import LIBRDKAFKA_LOGGER

ENV_PREFIX = "SHAREDSTREAM_CONN_"
AIRFLOW_PREFIX = "AIRFLOW_CONN_"
DEFAULT_GROUP_ID = "sharedstream"
FETCH_QUEUE_BACKOFF_MS = 100  # see the module doc; chosen by bench/json_fanout.py
RECONNECT_BACKOFF_MS = 25  # see the module doc; measured by bench/startup.py

# Keys whose values are secrets: matched on the dotted name, case-insensitive.
_SECRET_KEY = re.compile(r"(password|secret|token|sasl\.jaas|\.key\.pem|credentials)", re.I)


class ConnectionConfigError(ValueError):
    """A connection is missing or invalid. The message names the connection, never a secret."""


def env_var_name(connection_id: str) -> str:
    """``kafka_default`` -> ``SHAREDSTREAM_CONN_KAFKA_DEFAULT``."""
    return ENV_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", connection_id).upper()


def redacted(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy safe to log: every secret-looking value replaced by ``***``."""
    return {k: ("***" if _SECRET_KEY.search(k) else v) for k, v in config.items()}


def _is_false(value: Any) -> bool:
    # Only an explicit false is accepted; 0/"0"/"no" are refused on purpose (see module doc).
    return value is False or (isinstance(value, str) and value.strip().lower() == "false")


def validate_connection(connection_id: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """Apply the defaults and refusals above; return the config a consumer may use."""
    if "bootstrap.servers" not in config:
        raise ConnectionConfigError(
            f"connection {connection_id!r}: 'bootstrap.servers' is required"
        )
    if "enable.auto.commit" in config and not _is_false(config["enable.auto.commit"]):
        raise ConnectionConfigError(
            f"connection {connection_id!r}: 'enable.auto.commit' must be false or absent "
            "(sharedstream commits only what every watcher has persisted)"
        )
    if "enable.auto.offset.store" in config and not _is_false(config["enable.auto.offset.store"]):
        raise ConnectionConfigError(
            f"connection {connection_id!r}: 'enable.auto.offset.store' must be false or absent"
        )
    resolved = dict(config)
    if isinstance(resolved.get("oauth_cb"), str):
        try:
            resolved["oauth_cb"] = resolve_callable(resolved["oauth_cb"])
        except ValueError as exc:
            raise ConnectionConfigError(f"connection {connection_id!r}: oauth_cb: {exc}") \
                from None
    resolved["enable.auto.commit"] = False
    resolved["enable.auto.offset.store"] = False
    resolved.setdefault("auto.offset.reset", "earliest")
    resolved.setdefault("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS)
    resolved.setdefault("reconnect.backoff.ms", RECONNECT_BACKOFF_MS)
    return resolved


def resolve_callable(path: str) -> Callable[..., Any]:
    """The callable at dotted ``path`` (``package.module.function``); a ValueError naming
    what is missing otherwise."""
    module_name, _, attribute = path.rpartition(".")
    if not module_name:
        raise ValueError(f"{path!r}: write the dotted path, module.function")
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"{path!r} cannot be imported: {exc}") from None
    if not callable(found):
        raise ValueError(f"{path!r} is not callable")
    return found  # type: ignore[no-any-return]


def resolve_connection(
    connection_id: str,
    connections: Mapping[str, Mapping[str, Any]],
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The validated librdkafka config of ``connection_id``, from the sources above.

    A JSON error in an environment variable is reported without echoing its content
    (it may hold a password).
    """
    env = os.environ if environ is None else environ
    var = env_var_name(connection_id)
    found = connection_id in connections
    merged: dict[str, Any] = dict(connections.get(connection_id, {}))
    for name in (AIRFLOW_PREFIX + var[len(ENV_PREFIX):], var):
        raw = env.get(name)
        if raw is not None:
            merged.update(_json_connection(connection_id, name, raw))
            found = True
    prefix = var + "__"
    for name, value in env.items():
        if name.startswith(prefix) and len(name) > len(prefix):
            merged[name[len(prefix):].lower().replace("_", ".")] = value
            found = True
    if not found:
        raise ConnectionConfigError(
            f"connection {connection_id!r} is not configured: add [connections.{connection_id}] "
            f"to the config file or set {var}"
        )
    return validate_connection(connection_id, merged)


def _json_connection(connection_id: str, var: str, raw: str) -> dict[str, Any]:
    """A JSON connection: librdkafka keys, or an Airflow connection whose ``extra`` has them."""
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConnectionConfigError(
            f"connection {connection_id!r}: {var} is not valid JSON (line {exc.lineno}, "
            f"column {exc.colno})"
        ) from None
    if not isinstance(parsed, dict):
        raise ConnectionConfigError(f"connection {connection_id!r}: {var} must be a JSON object")
    if "conn_type" in parsed:
        if parsed["conn_type"] != "kafka":
            raise ConnectionConfigError(
                f"connection {connection_id!r}: {var} is an Airflow connection of type "
                f"{parsed['conn_type']!r}, not 'kafka'")
        extra = parsed.get("extra") or {}
        if isinstance(extra, str):
            try:
                extra = json.loads(extra)
            except json.JSONDecodeError:
                extra = None
        if not isinstance(extra, dict):
            raise ConnectionConfigError(
                f"connection {connection_id!r}: {var}'s extra must be a JSON object of "
                "librdkafka settings")
        return dict(extra)
    return parsed


def consumer_group_id(config: Mapping[str, Any], topics: Sequence[str]) -> str:
    """``<group.id>.<sorted topics joined by "+">``: one group per topic set.

    Two shared-stream groups on one connection with different topic sets must
    never share a consumer group, or the broker would split partitions between
    consumers that do not subscribe to the same topics.
    """
    base = str(config.get("group.id") or DEFAULT_GROUP_ID)
    return f"{base}.{'+'.join(sorted(topics))}"


# Consumer-only properties: handing them to a Producer only produces warnings.
_CONSUMER_ONLY = (
    "group.",
    "enable.auto.",
    "auto.offset.reset",
    "auto.commit.",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "partition.assignment.strategy",
    "max.poll.interval.ms",
    "isolation.level",
    "fetch.",
    "queued.",
    "enable.partition.eof",
    "check.crcs",
    "consume.callback.max.messages",
    "allow.auto.create.topics",
)


def client_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The connection config without consumer-only properties (admin and producer clients),
    logging through Python logging (see kafka.logs)."""
    out = {k: v for k, v in config.items() if not k.startswith(_CONSUMER_ONLY)}
    out.setdefault("logger", LIBRDKAFKA_LOGGER)
    return out


def producer_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The connection config for a producer whose delivery report means "durable".

    Idempotence and ``acks=all`` make a delivery report mean "durable on the broker":
    only then is a rejected message committed past (guarantee 6), a bridged Airflow
    event's cursor moved, or a delivered event's destination cursor moved.
    """
    out = client_config(config)
    out.setdefault("enable.idempotence", True)
    out.setdefault("acks", "all")
    out.setdefault("message.timeout.ms", 30000)
    return out
