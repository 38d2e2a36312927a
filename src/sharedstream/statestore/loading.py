"""Import a class named by a dotted path from the config and check what it is."""

from __future__ import annotations

import importlib


def load_class(dotted: str, base: type, option: str) -> type:
    """Return the class at ``module.Class`` (or ``module:Class``); it must subclass ``base``."""
    path = dotted.strip()
    if not path:
        raise ValueError(f"{option} is empty; remove it to use the default")
    module_name, sep, attr = path.replace(":", ".").rpartition(".")
    if not sep or not module_name:
        raise ValueError(f"{option} = {dotted!r} is not a dotted path (module.Class)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"{option} = {dotted!r}: cannot import {module_name}: {exc}") from exc
    try:
        found = getattr(module, attr)
    except AttributeError as exc:
        raise ValueError(f"{option} = {dotted!r}: {module_name} has no {attr}") from exc
    if not isinstance(found, type) or not issubclass(found, base):
        raise TypeError(f"{option} = {dotted!r} is not a subclass of {base.__qualname__}")
    return found
