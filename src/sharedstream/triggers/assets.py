"""Assets and asset watchers: what a watcher module declares.

Value types only; they validate names early so a typo fails at load time with
the offending name, not deep inside the triggerer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from sharedstream.triggers.base import BaseEventTrigger

# A watcher name is its identity in events, state writers, DLQ headers and metrics.
_WATCHER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,249}")
_MAX_ASSET_NAME = 1500


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

    ``name`` is non-empty, has no leading/trailing whitespace and no control
    characters, at most 1500 characters. ``uri`` (optional) is free-form.
    """

    name: str
    uri: str | None = None
    watchers: tuple[AssetWatcher, ...] = field(default=())

    def __init__(self, name: str, uri: str | None = None,
                 watchers: Iterable[AssetWatcher] = ()) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "uri", uri)
        object.__setattr__(self, "watchers", tuple(watchers))
        self.__post_init__()

    def __post_init__(self) -> None:
        name = self.name
        if (not isinstance(name, str) or not name or name != name.strip()
                or len(name) > _MAX_ASSET_NAME or not name.isprintable()):
            raise ValueError(f"invalid asset name {name!r}: non-empty, printable, no "
                             f"surrounding whitespace, at most {_MAX_ASSET_NAME} characters")
        if self.uri is not None and (not isinstance(self.uri, str) or not self.uri.strip()):
            raise ValueError(f"asset {name!r}: uri must be a non-empty string or None")
        seen: set[str] = set()
        for watcher in self.watchers:
            if not isinstance(watcher, AssetWatcher):
                raise TypeError(f"asset {name!r}: watchers must be AssetWatcher, "
                                f"got {type(watcher).__qualname__}")
            if watcher.name in seen:
                raise ValueError(f"asset {name!r}: watcher {watcher.name!r} listed twice")
            seen.add(watcher.name)
