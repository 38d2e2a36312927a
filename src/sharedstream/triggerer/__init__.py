"""The triggerer process: shared-stream manager, watcher loading, operations; it hands
windows to the unit of work (:mod:`sharedstream.uow`).

The embedded API's names load on first use (PEP 562), so importing a submodule
(``triggerer.signals``, which the CLI imports before anything heavy) stays cheap:
``from sharedstream.triggerer import Triggerer, Config, DatabaseSettings``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_PUBLIC = {
    "Config": "sharedstream.triggerer.config",
    "DatabaseSettings": "sharedstream.triggerer.config",
    "ProcessSettings": "sharedstream.triggerer.config",
    "load_config": "sharedstream.triggerer.config",
    "StartupError": "sharedstream.triggerer.embedded",
    "Triggerer": "sharedstream.triggerer.embedded",
    "TriggererFailed": "sharedstream.triggerer.embedded",
    "UnavailableError": "sharedstream.triggerer.embedded",
}

__all__ = sorted(_PUBLIC)

if TYPE_CHECKING:
    from sharedstream.triggerer.config import Config as Config
    from sharedstream.triggerer.config import DatabaseSettings as DatabaseSettings
    from sharedstream.triggerer.config import ProcessSettings as ProcessSettings
    from sharedstream.triggerer.config import load_config as load_config
    from sharedstream.triggerer.embedded import StartupError as StartupError
    from sharedstream.triggerer.embedded import Triggerer as Triggerer
    from sharedstream.triggerer.embedded import TriggererFailed as TriggererFailed
    from sharedstream.triggerer.embedded import UnavailableError as UnavailableError


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'sharedstream.triggerer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
