"""Assets and asset watchers: what a watcher module declares.

Value types only; they validate names early so a typo fails at load time with
the offending name, not deep inside the triggerer.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sharedstream.triggers.base import BaseEventTrigger

# A watcher name is its identity in events, state writers, DLQ headers and metrics.
_WATCHER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,249}")
_MAX_ASSET_NAME = 1500
# Airflow's Kafka provider: bootstrap servers (host:port, comma-separated), then a topic.
_AIRFLOW_KAFKA_URI = re.compile(r"kafka://[^/?#\s]+:\d+(,[^/?#\s]+:\d+)*/[^/?#\s]+", re.I)


@dataclass(frozen=True)
class AssetWatcher:
    """A named trigger that produces events for the asset it belongs to.

    ``name`` must be unique across the triggerer: letters, digits, ``_ . -``
    (not starting with ``.`` or ``-``), at most 250 characters.
    """

    name: str
    trigger: BaseEventTrigger

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _WATCHER_NAME.fullmatch(self.name):
            raise ValueError(
                f"invalid watcher name {self.name!r}: use letters, digits, '_', '.', '-' "
                "(not first), at most 250 characters")
        if not isinstance(self.trigger, BaseEventTrigger):
            raise TypeError(f"watcher {self.name!r}: trigger must be a BaseEventTrigger, "
                            f"got {type(self.trigger).__qualname__}")


@dataclass(frozen=True)
class Asset:
    """A named, event-producing thing; its watchers turn messages into its events.

    The signature is ``airflow.sdk.Asset``'s: ``Asset(name=None, uri=None, *, group=,
    extra=, watchers=)``. Give a name, a uri or both; a missing one is the other, as in
    Airflow. ``name`` is non-empty, has no leading/trailing whitespace and no control
    characters, at most 1500 characters. ``group`` and ``extra`` (a JSON object) are
    kept as given. A ``kafka://`` uri should be Airflow's form,
    ``kafka://host:port/topic``: Airflow's Kafka provider refuses any other, so a warning
    says so (the asset still works here).
    """

    name: str
    uri: str | None = None
    watchers: tuple[AssetWatcher, ...] = field(default=())
    group: str = "asset"
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __init__(self, name: str | None = None, uri: str | None = None, *,
                 group: str = "asset", extra: Mapping[str, Any] | None = None,
                 watchers: Iterable[AssetWatcher] = ()) -> None:
        if name is None and uri is None:
            raise TypeError("Asset() needs a name or a uri")
        object.__setattr__(self, "name", name if name is not None else uri)
        object.__setattr__(self, "uri", uri if uri is not None else name)
        object.__setattr__(self, "group", group)
        object.__setattr__(self, "extra", dict(extra or {}))
        object.__setattr__(self, "watchers", tuple(watchers))
        self.__post_init__()

    def __post_init__(self) -> None:
        name = self.name
        if (not isinstance(name, str) or not name or name != name.strip()
                or len(name) > _MAX_ASSET_NAME or not name.isprintable()):
            raise ValueError(f"invalid asset name {name!r}: non-empty, printable, no "
                             f"surrounding whitespace, at most {_MAX_ASSET_NAME} characters")
        if self.uri is not None and (not isinstance(self.uri, str) or not self.uri.strip()
                                     or not self.uri.isprintable()):
            raise ValueError(f"asset {name!r}: uri must be a non-empty printable string "
                             "(no control characters) or None")
        if not isinstance(self.group, str) or not self.group:
            raise ValueError(f"asset {name!r}: group must be a non-empty string")
        try:
            json.dumps(self.extra)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"asset {name!r}: extra must be JSON-serialisable: {exc}") from None
        if self.uri is not None and self.uri.lower().startswith("kafka:") and \
                not _AIRFLOW_KAFKA_URI.fullmatch(self.uri):
            warnings.warn(f"asset {name!r}: uri {self.uri!r} is not Airflow's Kafka form "
                          "kafka://host:port/topic, which Airflow's Kafka provider requires "
                          "(it refuses the DAG file); use that form, or match the asset by "
                          "name when delivering to Airflow", UserWarning, stacklevel=3)
        seen: set[str] = set()
        for watcher in self.watchers:
            if not isinstance(watcher, AssetWatcher):
                raise TypeError(f"asset {name!r}: watchers must be AssetWatcher, "
                                f"got {type(watcher).__qualname__}")
            if watcher.name in seen:
                raise ValueError(f"asset {name!r}: watcher {watcher.name!r} listed twice")
            seen.add(watcher.name)
