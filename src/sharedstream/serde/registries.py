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

``missing.schema.grace.sec`` (30 by default) is sharedstream's own key, not the
client's: how long a schema id the registry answers 404 for is held before it is the
value's fault (:mod:`sharedstream.serde.lookups` says when). A url that is not http
or https is refused here, so ``check`` says so, not the first framed message.

One client per registry id per triggerer, built on first use and kept: its schema
cache (see :mod:`sharedstream.serde.lookups`: one lookup per schema id, whichever
declaration asks) is what makes every lookup after the first free. Each triggerer of a
process has its own tables, clients and registry health (outages, failure counts:
its ``/readyz`` and ``/metrics``), in its :class:`SchemaRegistries`
(:func:`use_schema_registries`, set in its task's context, which the tasks and worker
threads it starts inherit): a second embedded triggerer with other
``[schema_registries]`` leaves the first's alone. Outside any triggerer (commands,
tests) the process's, set with :func:`configure_schema_registries`, are used.

Secrets (``basic.auth.user.info``, tokens, client secrets) never appear in an
error; :func:`redacted_registry` masks them for printing.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlsplit

from sharedstream.kafka.connections import redacted
from sharedstream.serde.lookups import (
    RegistryFigures,
    RegistryHealth,
    RegistryHealths,
    client_class,
)

ENV_PREFIX = "SHAREDSTREAM_SCHEMA_REGISTRY_"
DEFAULT_REGISTRY = "schema_registry_default"
_DEFAULTS: Mapping[str, Any] = {"max.retries": 0, "timeout": 5}
# How long a schema id the registry answers 404 for is held before it is the value's
# fault (see sharedstream.serde.lookups); sharedstream's key, not the client's.
GRACE_KEY = "missing.schema.grace.sec"
DEFAULT_GRACE_S = 30.0
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
    _check_urls(registry_id, config["url"])
    grace = config.get(GRACE_KEY)
    if grace is not None:
        config[GRACE_KEY] = _seconds(registry_id, GRACE_KEY, grace)
    for key in ("max.retries", "timeout", "cache.capacity", "cache.latest.ttl.sec"):
        if isinstance(config.get(key), str):
            try:
                config[key] = int(config[key])
            except ValueError:
                raise RegistryConfigError(
                    f"schema registry {registry_id!r}: {key!r} must be a whole number, "
                    f"not {config[key]!r}") from None
    return config


def _check_urls(registry_id: str, url: Any) -> None:
    """Every url of the (comma-separated) list is http or https: the client refuses
    anything else only when it is built, on the first framed message, which then waits
    for a fix that ``check`` could have asked for. The url is shown without its
    password."""
    if not isinstance(url, str):
        raise RegistryConfigError(f"schema registry {registry_id!r}: url must be text, "
                                  f"not {type(url).__name__}")
    for one in url.split(","):
        parts = urlsplit(one.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            shown = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl() \
                if "@" in parts.netloc else one.strip()
            raise RegistryConfigError(
                f"schema registry {registry_id!r}: url {shown!r} is not an HTTP url: "
                "give the registry's REST API as http:// or https://host:port (a list "
                "separated by commas for several)")


def _seconds(registry_id: str, key: str, value: Any) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if isinstance(value, bool) or not seconds >= 0:
        raise RegistryConfigError(f"schema registry {registry_id!r}: {key!r} must be a "
                                  f"number of seconds, 0 or more, not {value!r}")
    return seconds


class SchemaRegistries:
    """One set of registry tables, the clients built from them (one per id), and the
    health of each (:class:`RegistryHealths`: which is out, failures by reason)."""

    def __init__(self, tables: Mapping[str, Mapping[str, Any]] | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        self.tables: Mapping[str, Mapping[str, Any]] = {
            k: dict(v) for k, v in (tables or {}).items()}
        self.environ = environ
        self.clients: dict[str, Any] = {}
        self.health = RegistryHealths()
        self.lock = threading.Lock()


_process = SchemaRegistries()
_scoped: ContextVar[SchemaRegistries | None] = ContextVar("sharedstream_schema_registries",
                                                          default=None)


def _active() -> SchemaRegistries:
    return _scoped.get() or _process


def health(registry_id: str) -> RegistryHealth:
    """The :class:`RegistryHealth` of ``registry_id`` of the current triggerer (else the
    process's), made on first ask."""
    return _active().health.of(registry_id)


def registry_problems(registries: SchemaRegistries | None = None) -> list[str]:
    """Why the process (or the triggerer owning ``registries``, passed where its context
    is not: the health server's thread) is not ready on account of schema registries
    (empty: none is out)."""
    return (registries or _active()).health.problems()


def registry_figures(registries: SchemaRegistries | None = None) -> list[RegistryFigures]:
    """What ``/metrics`` shows of the registries of the process (or of the triggerer
    owning ``registries``)."""
    return (registries or _active()).health.figures()


def configure_schema_registries(tables: Mapping[str, Mapping[str, Any]],
                                environ: Mapping[str, str] | None = None) -> None:
    """Set the process's ``[schema_registries]`` tables (commands do; a triggerer uses
    :func:`use_schema_registries`); clients built from earlier tables, and what their
    lookups saw of each registry's health, are dropped. Unconfigured, registries come
    from the environment only."""
    with _process.lock:
        _process.tables = {k: dict(v) for k, v in tables.items()}
        _process.environ = environ
        _process.clients = {}
        _process.health = RegistryHealths()


def use_schema_registries(tables: Mapping[str, Mapping[str, Any]],
                          environ: Mapping[str, str] | None = None) -> SchemaRegistries:
    """New registries from ``tables`` for the current context (a triggerer's task, and
    what it starts from now on); the triggerer keeps them to report their health."""
    registries = SchemaRegistries(tables, environ)
    _scoped.set(registries)
    return registries


def registry_client(registry_id: str) -> Any:
    """The ``SchemaRegistryClient`` for ``registry_id`` of the current triggerer (else
    the process's), built on first use.

    Raises :class:`RegistryConfigError` for a missing or invalid connection, and
    ImportError (with the extra to install) without ``confluent-kafka[schemaregistry]``.
    """
    registries = _active()
    with registries.lock:
        client = registries.clients.get(registry_id)
        if client is None:
            config = resolve_registry(registry_id, registries.tables, registries.environ)
            try:
                make = client_class()
            except ImportError as exc:
                raise ImportError(
                    f"schema registry {registry_id!r}: {exc}; install "
                    "sharedstream[schema-registry]") from None
            grace = config.pop(GRACE_KEY, DEFAULT_GRACE_S)
            try:
                client = make(config, registries.health.of(registry_id), grace)
            except (ValueError, TypeError) as exc:
                raise RegistryConfigError(
                    f"schema registry {registry_id!r}: {_without_secrets(str(exc), config)}"
                ) from None
            registries.clients[registry_id] = client
        return client


def _without_secrets(text: str, config: Mapping[str, Any]) -> str:
    for key, value in config.items():
        if isinstance(value, str) and value and redacted_registry({key: value})[key] == "***":
            text = text.replace(value, "***")
    return text
