"""The effective configuration, value by value, with where each came from.

``sharedstream config show`` prints it. Every value is the one ``load_config`` produced
(so it is validated); its source is the environment variable that set it, the file,
or ``default``. Secrets are masked: values of secret-looking keys, and the password of
any URL.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from sharedstream.kafka.connections import AIRFLOW_PREFIX, ENV_PREFIX, env_var_name
from sharedstream.serde import registries
from sharedstream.triggerer.config import Config, load_config
from sharedstream.triggerer.settings_loader import ENV_PREFIX as SETTINGS_PREFIX
from sharedstream.triggerer.settings_loader import read_toml

_SECRET = re.compile(r"(password|secret|token|sasl\.jaas|\.key\.pem|credentials)", re.I)


@dataclass(frozen=True, slots=True)
class Setting:
    section: str
    key: str
    value: Any
    source: str


def masked(key: str, value: Any) -> Any:
    if value is None:
        return None
    if _SECRET.search(key):
        return "***"
    if isinstance(value, str) and "://" in value:
        try:
            return make_url(value).render_as_string(hide_password=True)
        except ArgumentError:
            return value
    return value


def effective_settings(path: str | Path | None = None,
                       env: Mapping[str, str] | None = None) -> tuple[Config, list[Setting]]:
    """The loaded config and every value of it, masked, with its source."""
    environ = os.environ if env is None else env
    config = load_config(path, environ)
    raw = read_toml(config.path) if config.path is not None else {}
    file = str(config.path) if config.path is not None else None
    return config, list(_settings(config, raw, file, environ))


def _settings(config: Config, raw: Mapping[str, Any], file: str | None,
              env: Mapping[str, str]) -> Iterator[Setting]:
    def source(section: str, key: str, table: Mapping[str, Any]) -> str:
        var = f"{SETTINGS_PREFIX}{section.replace('.', '__').upper()}__{key.upper()}"
        if var in env:
            return var
        return file if file is not None and key in table else "default"

    plain: list[tuple[str, Any]] = [("database", config.database), ("triggerer", config.manager),
             ("triggerer", config.process), ("state_store", config.state_store),
             ("web", config.web)]
    for section, settings in plain:
        table = raw.get(section, {})
        for f in dataclasses.fields(settings):
            if section == "state_store" and f.name.startswith("payload_"):
                continue  # they are [workers]' options
            yield Setting(section, f.name, masked(f.name, getattr(settings, f.name)),
                          source(section, f.name, table))
    workers = raw.get("workers", {})
    for key, value in (("state_backend", config.state_store.payload_backend),
                       ("state_dir", config.state_store.payload_dir)):
        yield Setting("workers", key, masked(key, value), source("workers", key, workers))
    for name, instance in config.airflow.items():
        section, table = f"airflow.{name}", raw.get("airflow", {}).get(name, {})
        for f in dataclasses.fields(instance):
            yield Setting(section, f.name, masked(f.name, getattr(instance, f.name)),
                          source(section, f.name, table))
    for dest_id, dest in config.destinations.items():
        section, table = f"destinations.{dest_id}", raw.get("destinations", {}).get(dest_id, {})
        for part in (dest.common, dest.options):
            for f in dataclasses.fields(part):
                yield Setting(section, f.name, masked(f.name, getattr(part, f.name)),
                              source(section, f.name, table))
    yield from _connections(config, file, env)
    yield from _schema_registries(config, file, env)


def _schema_registries(config: Config, file: str | None, env: Mapping[str, str]
                       ) -> Iterator[Setting]:
    """Registry connections as the file and the environment give them, secrets masked."""
    ids = set(config.schema_registries)
    ids |= {name[len(registries.ENV_PREFIX):].split("__")[0].lower() for name in env
            if name.startswith(registries.ENV_PREFIX) and name[len(registries.ENV_PREFIX):]}
    for registry_id in sorted(ids):
        keys = registries.registry_sources(registry_id, config.schema_registries, env)
        shown = registries.redacted_registry({k: v for k, (v, _) in keys.items()})
        for key, (value, where) in sorted(keys.items()):
            yield Setting(f"schema_registries.{registry_id}", key,
                          "***" if shown[key] == "***" else masked(key, value),
                          where or file or "default")


def _connections(config: Config, file: str | None, env: Mapping[str, str]
                 ) -> Iterator[Setting]:
    """Connections as the file and the environment give them (before sharedstream's own
    defaults, which ``run`` adds): the environment wins key by key."""
    ids = set(config.connections)
    for name in env:
        for prefix in (ENV_PREFIX, AIRFLOW_PREFIX):
            if name.startswith(prefix) and name[len(prefix):]:
                ids.add(name[len(prefix):].split("__")[0].lower())
    for conn_id in sorted(ids):
        var = env_var_name(conn_id)
        keys: dict[str, tuple[Any, str]] = {
            k: (v, file or "default") for k, v in config.connections.get(conn_id, {}).items()}
        for name in (AIRFLOW_PREFIX + var[len(ENV_PREFIX):], var):
            if name in env:
                keys.update({k: (v, name) for k, v in _json_values(env[name]).items()})
        prefix = var + "__"
        for name, value in env.items():
            if name.startswith(prefix) and len(name) > len(prefix):
                keys[name[len(prefix):].lower().replace("_", ".")] = (value, name)
        for key, (value, where) in sorted(keys.items()):
            yield Setting(f"connections.{conn_id}", key, masked(key, value), where)


def _json_values(raw: str) -> dict[str, Any]:
    """A JSON connection's settings (an Airflow connection's ``extra``); {} if unreadable,
    which ``load_config`` has reported already."""
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {}
    if isinstance(parsed, dict) and isinstance(parsed.get("extra"), dict):
        parsed = parsed["extra"]
    return parsed if isinstance(parsed, dict) else {}
