"""Typed loading of ``sharedstream.toml`` sections, with environment overrides.

Each section of the file maps onto a dataclass whose fields carry their defaults.
Values are checked against the field's type at load time so a typo fails the
start-up with a one-line error naming the key and the file, before any consumer
or database connection exists. Environment variables named
``SHAREDSTREAM__<SECTION>__<KEY>`` override the file; they arrive as strings and
are parsed as TOML scalars (``10``, ``1.5``, ``true``) or taken as plain strings.

Values that may hold secrets (a database URL with a password) are never echoed
back in an error: errors name the key, the expected type and the source.
"""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
import types
import typing
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, TypeVar

ENV_PREFIX = "SHAREDSTREAM__"
# Sections made of named tables whose keys the environment may set one by one.
TABLE_SECTIONS = frozenset({"destinations", "airflow"})

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration problem the operator must fix; the CLI exits with code 2."""


@dataclasses.dataclass(frozen=True, slots=True)
class Source:
    """Where a section's values came from, for error messages."""

    path: Path | None

    def describe(self, section: str, key: str, *, from_env: bool) -> str:
        if from_env:
            return f"environment variable {env_name(section, key)}"
        where = str(self.path) if self.path is not None else "built-in defaults"
        return f"[{section}] {key} in {where}"

    def missing(self, section: str, key: str, why: str = "") -> ConfigError:
        """A required option set nowhere: where it may be set (secrets: the environment)."""
        where = str(self.path) if self.path is not None else "the config file"
        return ConfigError(f"[{section}] {key}: missing{why}; set it in {where} or in the "
                           f"environment variable {env_name(section, key)}")


def env_name(section: str, key: str) -> str:
    """The variable that sets ``key`` of ``section`` (``destinations.billing``, ``secret``)."""
    return f"{ENV_PREFIX}{section.replace('.', '__').upper()}__{key.upper()}"


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file, turning syntax errors into a ConfigError with file and line."""
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None


def env_overrides(env: Mapping[str, str], sections: Collection[str] = ()
                  ) -> dict[str, dict[str, Any]]:
    """Collect ``SHAREDSTREAM__<SECTION>__<KEY>`` variables as ``{section: {key: value}}``.

    A section of tables (``[destinations.<id>]``) takes one more level,
    ``SHAREDSTREAM__<SECTION>__<ID>__<KEY>``, collected as ``{"section.id": {key: value}}``.
    A section not in ``sections`` (when given) is refused here, naming the variable:
    the file is not where that mistake is.
    """
    found: dict[str, dict[str, Any]] = {}
    for name, raw in env.items():
        if not name.startswith(ENV_PREFIX):
            continue
        parts = name[len(ENV_PREFIX) :].split("__")
        if sections and parts[0] and parts[0].lower() not in sections:
            fixed = suggestion(parts[0].lower(), sections)
            hint = f"did you mean {ENV_PREFIX}{'__'.join([fixed.upper(), *parts[1:]])}? " \
                if fixed else ""
            raise ConfigError(f"environment variable {name}: unknown section "
                              f"{parts[0].lower()!r} ({hint}known: {', '.join(sections)})")
        if len(parts) == 3 and parts[0].lower() in TABLE_SECTIONS and all(parts):
            section, table, key = (p.lower() for p in parts)
            found.setdefault(f"{section}.{table}", {})[key] = _parse_env_scalar(raw)
            continue
        if len(parts) != 2 or not all(parts):
            raise ConfigError(
                f"environment variable {name}: expected {ENV_PREFIX}<SECTION>__<KEY>"
            )
        section, key = (p.lower() for p in parts)
        found.setdefault(section, {})[key] = _parse_env_scalar(raw)
    return found


def _parse_env_scalar(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def build_section(
    cls: type[T],
    section: str,
    values: Mapping[str, Any],
    source: Source,
    env_keys: frozenset[str] = frozenset(),
) -> T:
    """Build dataclass ``cls`` from ``values``, checking every key and type.

    Unknown keys are errors (a misspelt option silently ignored is how data
    platforms lose a day). ``__post_init__`` validation errors (ValueError /
    TypeError raised by the dataclass) are re-raised as ConfigError naming the
    source; a required option given nowhere names its key and its variable.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        where = source.describe(section, key, from_env=key in env_keys)
        if key not in fields:
            raise unknown_option(section, key, fields, source, from_env=key in env_keys)
        kwargs[key] = _coerce(value, hints[key], where)
    for name, f in fields.items():
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and name not in kwargs:
            raise source.missing(section, name)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        where = str(source.path) if source.path is not None else "built-in defaults"
        raise ConfigError(f"[{section}] in {where}: {exc}") from None


def suggestion(name: str, known: Collection[str]) -> str | None:
    """The known name closest to a misspelt ``name``, if one is close."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return close[0] if close else None


def unknown_option(section: str, key: str, known: Collection[str], source: Source, *,
                   from_env: bool) -> ConfigError:
    """``key`` is no option of ``section``: named as it was given (the file's key or the
    environment variable), with the closest option spelt the same way."""
    fixed = suggestion(key, known)
    hint = ""
    if fixed is not None:
        hint = f"did you mean {env_name(section, fixed) if from_env else fixed}? "
    return ConfigError(f"{source.describe(section, key, from_env=from_env)}: unknown option "
                       f"({hint}known: {', '.join(sorted(known))})")


def _coerce(value: Any, hint: Any, where: str) -> Any:
    """Check ``value`` against a field type; ints are accepted where floats are expected."""
    allowed = _allowed_types(hint)
    if value is None and type(None) in allowed:
        return None
    if isinstance(value, bool):
        if bool in allowed:
            return value
    elif isinstance(value, int) and int in allowed:
        return value
    elif isinstance(value, int | float) and float in allowed:
        return float(value)
    elif isinstance(value, str | dict | list) and type(value) in allowed:
        return value
    names = " or ".join(sorted(t.__name__ for t in allowed))
    raise ConfigError(f"{where}: expected {names}, got {type(value).__name__}")


def _allowed_types(hint: Any) -> set[type]:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        allowed: set[type] = set()
        for arg in typing.get_args(hint):
            allowed |= _allowed_types(arg)
        return allowed
    if origin is not None:
        return {origin}
    if hint is type(None):
        return {type(None)}
    if isinstance(hint, type):
        return {hint}
    raise TypeError(f"unsupported option type {hint!r}")
