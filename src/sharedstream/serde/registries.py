"""Schema registry connections: ``[schema_registries.<id>]``, configured like Kafka ones.

A registry connection is a ``confluent_kafka.schema_registry.SchemaRegistryClient``
config (``url``, ``basic.auth.user.info``, ``ssl.ca.location``, ...), assembled from
these sources, each later one winning key by key (the environment wins over the file):

1. the config file's ``[schema_registries.<id>]`` table;
2. ``SHAREDSTREAM_SCHEMA_REGISTRY_<ID>``: a JSON object of the same keys;
3. ``SHAREDSTREAM_SCHEMA_REGISTRY_<ID>__<KEY>``, one variable per key, dots written as
   underscores: ``..._DEFAULT__BASIC_AUTH_USER_INFO`` sets ``basic.auth.user.info``.

``url`` is the one required key. Unless the connection says otherwise, the client
makes no retries of its own (``max.retries`` 0) and gives a request 5 s
(``timeout``): a lookup on a cache miss runs in a worker thread (see
:mod:`sharedstream.serde.values`), and a registry that does not answer is retried by
redelivering the message with backoff instead, which never dead-letters.

One client per registry id per process, built on first use and kept: its schema
cache (by id, by subject and version) is what makes every lookup after the first
free. Secrets (``basic.auth.user.info``, tokens, client secrets) never appear in an
error; :func:`redacted_registry` masks them for printing.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Mapping
from typing import Any

from sharedstream.kafka.connections import redacted

ENV_PREFIX = "SHAREDSTREAM_SCHEMA_REGISTRY_"
DEFAULT_REGISTRY = "schema_registry_default"
_DEFAULTS: Mapping[str, Any] = {"max.retries": 0, "timeout": 5}
_USER_INFO = re.compile(r"user\.info", re.I)


class RegistryConfigError(ValueError):
    """A registry connection is missing or invalid; the message never holds a secret."""


def registry_env_var(registry_id: str) -> str:
    """``schema_registry_default`` -> ``SHAREDSTREAM_SCHEMA_REGISTRY_SCHEMA_REGISTRY_DEFAULT``."""
    return ENV_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", registry_id).upper()


def redacted_registry(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy safe to print: Kafka's secret keys and ``basic.auth.user.info`` masked."""
    return {k: ("***" if _USER_INFO.search(k) else v) for k, v in redacted(config).items()}


def registry_sources(registry_id: str, tables: Mapping[str, Mapping[str, Any]],
                     environ: Mapping[str, str]) -> dict[str, tuple[Any, str | None]]:
    """Every key of ``registry_id`` with the variable that set it (None: the file)."""
    var = registry_env_var(registry_id)
    keys: dict[str, tuple[Any, str | None]] = {
        k: (v, None) for k, v in tables.get(registry_id, {}).items()}
    raw = environ.get(var)
    if raw is not None:
        try:
            parsed = json.loads(raw)
        except ValueError as exc:
            raise RegistryConfigError(
                f"schema registry {registry_id!r}: {var} is not valid JSON ({exc.args[0]})"
            ) from None
        if not isinstance(parsed, dict):
            raise RegistryConfigError(
                f"schema registry {registry_id!r}: {var} must be a JSON object")
        keys.update({k: (v, var) for k, v in parsed.items()})
    prefix = var + "__"
    for name, value in environ.items():
        if name.startswith(prefix) and len(name) > len(prefix):
            keys[name[len(prefix):].lower().replace("_", ".")] = (value, name)
    return keys


def resolve_registry(registry_id: str, tables: Mapping[str, Mapping[str, Any]],
                     environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The client config of ``registry_id`` from the sources above, with the defaults."""
    env = os.environ if environ is None else environ
    keys = registry_sources(registry_id, tables, env)
    if not keys:
        raise RegistryConfigError(
            f"schema registry {registry_id!r} is not configured: add "
            f"[schema_registries.{registry_id}] with a url to the config file or set "
            f"{registry_env_var(registry_id)}__URL")
    config = {**_DEFAULTS, **{k: v for k, (v, _) in keys.items()}}
    if not config.get("url"):
        raise RegistryConfigError(f"schema registry {registry_id!r}: 'url' is required")
    for key in ("max.retries", "timeout", "cache.capacity", "cache.latest.ttl.sec"):
        if isinstance(config.get(key), str):
            try:
                config[key] = int(config[key])
            except ValueError:
                raise RegistryConfigError(
                    f"schema registry {registry_id!r}: {key!r} must be a whole number, "
                    f"not {config[key]!r}") from None
    return config


class _Registries:
    """The process's registry tables and the clients built from them (one per id)."""

    def __init__(self) -> None:
        self.tables: Mapping[str, Mapping[str, Any]] = {}
        self.environ: Mapping[str, str] | None = None
        self.clients: dict[str, Any] = {}
        self.lock = threading.Lock()


_registries = _Registries()
# registry id -> why its last lookup failed; cleared by its next answered lookup.
_outages: dict[str, str] = {}


def note_outage(registry_id: str, why: str) -> None:
    _outages[registry_id] = why


def note_answered(registry_id: str) -> None:
    _outages.pop(registry_id, None)


def any_outage() -> bool:
    return bool(_outages)


def registry_problems() -> list[str]:
    """Why the process is not ready on account of schema registries (empty: none is out).

    A registry counts as out from a lookup that failed for want of it until a lookup
    that it answers; a message held for it is retried with backoff meanwhile.
    """
    return [f"schema registry {rid!r}: {why}" for rid, why in sorted(_outages.items())]


def configure_schema_registries(tables: Mapping[str, Mapping[str, Any]],
                                environ: Mapping[str, str] | None = None) -> None:
    """Set the ``[schema_registries]`` tables (the triggerer does, at start-up); clients
    built from earlier tables are dropped. Unconfigured, registries come from the
    environment only."""
    with _registries.lock:
        _registries.tables = {k: dict(v) for k, v in tables.items()}
        _registries.environ = environ
        _registries.clients = {}
        _outages.clear()


def registry_client(registry_id: str) -> Any:
    """The process's ``SchemaRegistryClient`` for ``registry_id``, built on first use.

    Raises :class:`RegistryConfigError` for a missing or invalid connection, and
    ImportError (with the extra to install) without ``confluent-kafka[schemaregistry]``.
    """
    with _registries.lock:
        client = _registries.clients.get(registry_id)
        if client is None:
            config = resolve_registry(registry_id, _registries.tables, _registries.environ)
            try:
                from confluent_kafka.schema_registry import SchemaRegistryClient
            except ImportError as exc:
                raise ImportError(
                    f"schema registry {registry_id!r}: {exc}; install "
                    "sharedstream[schema-registry]") from None
            try:
                client = SchemaRegistryClient(config)
            except (ValueError, TypeError) as exc:
                raise RegistryConfigError(
                    f"schema registry {registry_id!r}: {_without_secrets(str(exc), config)}"
                ) from None
            _registries.clients[registry_id] = client
        return client


def unreachable(exc: BaseException) -> bool:
    """True for a failure to reach the registry at all (refused, reset, timed out): an
    OSError or one of the HTTP client's transport errors (confluent-kafka's client is
    httpx, vendored as ``httpx2`` in recent releases)."""
    return isinstance(exc, OSError) or type(exc).__module__.split(".")[0] in (
        "httpx", "httpx2", "httpcore", "httpcore2")


def _without_secrets(text: str, config: Mapping[str, Any]) -> str:
    for key, value in config.items():
        if isinstance(value, str) and value and redacted_registry({key: value})[key] == "***":
            text = text.replace(value, "***")
    return text
