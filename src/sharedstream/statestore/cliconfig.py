"""Stop-gap reader of the config file for the ``db``/``state-store`` commands.

Reads ``[database] url``, ``[state_store]`` and ``[workers] state_backend``/``state_dir``
with tomllib, until ``sharedstream.triggerer.config.load_config`` replaces it.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from sharedstream.statestore.settings import StateStoreSettings

DEFAULT_DATABASE_URL = "sqlite:///sharedstream.db"


class ConfigProblem(ValueError):
    """The config is unusable; commands exit with code 2."""


@dataclass(frozen=True)
class StoreConfig:
    database_url: str = DEFAULT_DATABASE_URL
    state_store: StateStoreSettings = field(default_factory=StateStoreSettings)


def load_store_config(path: str | None, database_url: str | None) -> StoreConfig:
    data: dict[str, object] = {}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigProblem(f"cannot read config {path}: {exc}") from None
    database = data.get("database", {})
    state = data.get("state_store", {})
    workers = data.get("workers", {})
    if not (isinstance(database, dict) and isinstance(state, dict)
            and isinstance(workers, dict)):
        raise ConfigProblem("[database], [state_store] and [workers] must be tables")
    url = (database_url or os.environ.get("SHAREDSTREAM__DATABASE__URL")
           or database.get("url") or DEFAULT_DATABASE_URL)
    options = dict(state)
    if "state_backend" in workers:
        options["payload_backend"] = workers["state_backend"]
    if "state_dir" in workers:
        options["payload_dir"] = workers["state_dir"]
    try:
        settings = StateStoreSettings(**options)
    except (TypeError, ValueError) as exc:
        raise ConfigProblem(f"[state_store]/[workers]: {exc}") from None
    return StoreConfig(str(url), settings)
