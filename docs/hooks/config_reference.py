"""MkDocs hook: the configuration reference, generated from the settings' own definitions.

A page asks for a section's table with a block of its own::

    <!-- config-reference: triggerer -->
    <!-- /config-reference -->

and ``references.py`` fills the block with a table (committed, and rendered afresh at
build time) built from the
dataclass that loads that section of ``sharedstream.toml``: every field's name,
type, default, environment override and help. Nothing in the table is typed
by hand, so it cannot drift from the code.

Where a field's help comes from (the convention the settings classes follow):

1. ``field(metadata={"help": "..."})`` on the field, when present;
2. otherwise a bullet of the class docstring naming the field in double
   backticks: ``* ``name``: help text`` (continuation lines indented). A bullet
   may name several fields (``* ``a`` / ``b``: ...`` or ``* ``a`` + ``b``: ...``);
   each gets the text.

The build fails (so ``mkdocs build --strict`` fails in CI) when a field has no
help, when a bullet names a field that does not exist, when a section of the
loader has no table anywhere in the manual, or when an environment override
this page shows is not accepted by the real loader.

``[connections.<id>]`` tables are librdkafka dicts, not dataclasses: their table
is built by asking :mod:`sharedstream.kafka.connections` what it requires,
defaults, forces and refuses (calling its functions on sample configs), with
help from the bullets of that module's docstring.

The module imports nothing from MkDocs at import time, so the unit tests can
call :func:`render_section` without MkDocs installed.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import sys
import tempfile
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from types import NoneType, UnionType
from typing import Any

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT / "src") not in sys.path:
    # Builds from a checkout without `pip install -e .` still find the package.
    sys.path.append(str(_ROOT / "src"))

MARKER = re.compile(r"^<!--[ \t]*config-reference:[ \t]*(?P<section>[\w.<>]+)[ \t]*-->[ \t]*$",
                    re.M)


class ReferenceDrift(Exception):
    """The settings and their documentation disagree; the build must stop."""


# --------------------------------------------------------------------------- help text


_BULLET = re.compile(
    r"^\*\s+(?P<names>``[^`]+``(?:\s*(?:/|\+|,|and)\s*``[^`]+``)*)\s*:?\s*(?P<text>.*)$")


def rst_to_markdown(text: str) -> str:
    """The few reStructuredText forms the docstrings use, as Markdown."""
    text = re.sub(r":(?:class|func|meth|mod|attr):`~?([^`]+)`",
                  lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", text)
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    return text.replace(" -> ", " → ").replace("|", "\\|")


def docstring_bullets(doc: str | None) -> dict[str, str]:
    """``{name: help}`` from the ``* ``name``: help`` bullets of a docstring."""
    found: dict[str, str] = {}
    names: list[str] = []
    parts: list[str] = []

    def flush() -> None:
        if names:
            text = rst_to_markdown(" ".join(parts).strip())
            text = text[:1].upper() + text[1:]
            if len(names) > 1:  # one text for several fields: say which go together
                text = f"{' / '.join(f'`{n}`' for n in names)}: {text}"
            for name in names:
                found[name] = text

    for line in inspect.cleandoc(doc or "").splitlines():
        match = _BULLET.match(line)
        if match:
            flush()
            names = re.findall(r"``([^`]+)``", match.group("names"))
            parts = [match.group("text")]
        elif names and line.startswith("  ") and line.strip():
            parts.append(line.strip())
        else:
            flush()
            names, parts = [], []
    flush()
    return found


def field_help(cls: type, fields: list[dataclasses.Field[Any]]) -> dict[str, str]:
    """Help of every field of ``cls``: metadata first, then the docstring's bullets."""
    bullets = docstring_bullets(cls.__doc__)
    known = {f.name for f in dataclasses.fields(cls)}
    stale = sorted(set(bullets) - known)
    if stale:
        raise ReferenceDrift(f"{cls.__qualname__}'s docstring documents {stale}, which are "
                             "not fields: update the bullet")
    helps: dict[str, str] = {}
    for f in fields:
        text = f.metadata.get("help") if f.metadata else None
        text = rst_to_markdown(text) if text else bullets.get(f.name)
        if not text:
            raise ReferenceDrift(
                f"{cls.__module__}.{cls.__qualname__}.{f.name} has no help: add "
                f"'* ``{f.name}``: ...' to the class docstring (or metadata={{'help': ...}})")
        helps[f.name] = text
    return helps


# --------------------------------------------------------------------------- dataclass tables


def type_name(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, UnionType):
        args = [a for a in typing.get_args(hint) if a is not NoneType]
        inner = " or ".join(type_name(a) for a in args)
        return f"{inner}, optional" if len(args) < len(typing.get_args(hint)) else inner
    return {str: "string", int: "integer", float: "float", bool: "boolean"}.get(
        hint, getattr(hint, "__name__", str(hint)))


def toml_value(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{'true' if value else 'false'}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value!r}`"


def default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _env_scalar(value: Any) -> str:
    """A TOML scalar the loader's environment parser turns back into ``value``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "x"
    return str(value)


class Section:
    """One section of the file: the dataclasses that load it and how it is overridden."""

    def __init__(self, name: str, classes: list[type], *, env: bool = True,
                 exclude: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.classes = classes
        self.env = env
        self.exclude = dict(exclude or {})

    def fields(self) -> list[tuple[type, dataclasses.Field[Any]]]:
        every = {f.name for cls in self.classes for f in dataclasses.fields(cls)}
        missing = sorted(set(self.exclude) - every)
        if missing:
            raise ReferenceDrift(f"[{self.name}]: no field(s) {missing} to leave out")
        return [(cls, f) for cls in self.classes for f in dataclasses.fields(cls)
                if f.init and f.name not in self.exclude]

    def env_name(self, key: str) -> str:
        from sharedstream.triggerer.settings_loader import ENV_PREFIX

        return f"{ENV_PREFIX}{self.name.upper()}__{key.upper()}"

    def probe_env(self, key: str, default: Any) -> None:
        """The real loader must take the override the table shows for ``key``."""
        check_env_override(self.env_name(key), default)

    def render(self) -> str:
        rows = []
        for cls, f in self.fields():
            hint = typing.get_type_hints(cls)[f.name]
            default = default_of(f)
            shown = "required" if default is dataclasses.MISSING else toml_value(default)
            env = f"`{self.env_name(f.name)}`" if self.env else "file only"
            text = field_help(cls, [f])[f.name]
            rows.append(f"| `{f.name}` | {type_name(hint)} | {shown} | {env} | {text} |")
            if self.env:
                self.probe_env(f.name, default)
        head = ["| option | type | default | environment override | meaning |",
                "|---|---|---|---|---|"]
        notes = [f"- `{key}` is not an option of this section: {why}."
                 for key, why in self.exclude.items()]
        return "\n".join(head + rows + (["", *notes] if notes else []))


# A minimal valid table per destination kind: the file the env probes override.
_DESTINATION_PROBES = {
    "airflow": '[airflow.probe]\nbase_url = "http://airflow:8080"\ntoken = "t"\n'
               '[destinations.probe]\nkind = "airflow"\ninstance = "probe"\n',
    "webhook": '[destinations.probe]\nkind = "webhook"\nurl = "https://hooks.example"\n'
               'secret = "s"\n',
    "kafka": '[destinations.probe]\nkind = "kafka"\ntopic = "events"\n',
}


# Valid values of the required options, for the probes that override them.
_REQUIRED_SAMPLES = {"url": "https://hooks.example", "secret": "s", "instance": "probe",
                     "topic": "events", "base_url": "http://airflow:8080", "token": "t",
                     "username": "u", "password": "p", "payload_schema": '{"type": "string"}'}
# Keys that only go together: probed on a file that already has their partner.
_LOGIN_PROBE = ('[airflow.probe]\nbase_url = "http://airflow:8080"\nusername = "u"\n'
                'password = "p"\n')
_PROBE_FOR_KEY = {"airflow": {"username": _LOGIN_PROBE, "password": _LOGIN_PROBE}}


class TableSection(Section):
    """A section of named tables (``[destinations.<id>]``, ``[airflow.<name>]``), each key
    overridden per table; ``probe`` is a minimal valid file the env probes override."""

    def __init__(self, name: str, classes: list[type], probe: str, table: str = "<ID>") -> None:
        super().__init__(name, classes)
        self.probe = probe
        self.table = table

    def env_name(self, key: str) -> str:
        from sharedstream.triggerer.settings_loader import ENV_PREFIX

        return f"{ENV_PREFIX}{self.name.upper()}__{self.table}__{key.upper()}"

    def probe_env(self, key: str, default: Any) -> None:
        if key == "kind":
            return  # it decides which table this is: not overridable alone
        probe = _PROBE_FOR_KEY.get(self.name, {}).get(key, self.probe)
        check_env_override(self.env_name(key).replace(self.table, "PROBE"),
                           _REQUIRED_SAMPLES.get(key, default), probe)


def check_env_override(name: str, default: Any, base: str = "") -> None:
    """The real loader must accept ``name`` (and refuse a misspelt sibling)."""
    from sharedstream.triggerer.config import ConfigError, load_config

    value = default if default is not dataclasses.MISSING else None
    # Arrays and tables travel as TOML text: ["a", "b"], {a = "b"}. An array with a
    # default is probed with it (its items may have to parse: networks, say).
    raw = (('[' + ", ".join(json.dumps(v) for v in value) + ']' if value else '["x"]')
           if isinstance(value, list) else '{a = "b"}' if isinstance(value, dict) else None)
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "sharedstream.toml"
        empty.write_text(base)
        try:
            load_config(empty, env={name: raw if raw is not None else _env_scalar(value)})
        except ConfigError as exc:
            raise ReferenceDrift(f"the loader refuses {name}, which the reference shows: "
                                 f"{exc}") from None
        try:
            load_config(empty, env={name + "_NOT_AN_OPTION": "1"})
        except ConfigError:
            return
        raise ReferenceDrift(f"the loader accepts a misspelt {name}: the probe proves nothing")


def sections() -> dict[str, Section | Callable[[], str]]:
    from sharedstream.airflowbridge.settings import AirflowInstanceSettings
    from sharedstream.core.streamconfig import ManagerSettings
    from sharedstream.delivery.settings import (
        AirflowDestination,
        CommonOptions,
        KafkaDestination,
        WebhookDestination,
    )
    from sharedstream.statestore.settings import StateStoreSettings
    from sharedstream.triggerer import config

    return {
        "database": Section("database", [config.DatabaseSettings]),
        "triggerer": Section("triggerer", [ManagerSettings, config.ProcessSettings]),
        "state_store": Section("state_store", [StateStoreSettings], exclude={
            "payload_backend": "it is `[workers] state_backend`",
            "payload_dir": "it is `[workers] state_dir`"}),
        "workers": Section("workers", [config.WorkersSettings]),
        "web": Section("web", [config.WebSettings]),
        "airflow.<name>": TableSection("airflow", [AirflowInstanceSettings],
                                       _DESTINATION_PROBES["airflow"], table="<NAME>"),
        "connections.<id>": render_connections,
        "schema_registries.<id>": render_schema_registries,
        "destinations.<id>": TableSection("destinations", [CommonOptions],
                                          _DESTINATION_PROBES["webhook"]),
        "destinations.<id>.airflow": TableSection(
            "destinations", [AirflowDestination], _DESTINATION_PROBES["airflow"]),
        "destinations.<id>.webhook": TableSection(
            "destinations", [WebhookDestination], _DESTINATION_PROBES["webhook"]),
        "destinations.<id>.kafka": TableSection(
            "destinations", [KafkaDestination], _DESTINATION_PROBES["kafka"]),
    }


def loader_sections() -> set[str]:
    """The sections ``load_config`` knows, as the markers name them."""
    from sharedstream.triggerer import config

    tables = {"connections": "connections.<id>", "airflow": "airflow.<name>",
              "destinations": "destinations.<id>", "schema_registries": "schema_registries.<id>"}
    kinds = {f"destinations.<id>.{kind}" for kind in ("airflow", "webhook", "kafka")}
    return {tables.get(name, name) for name in config._SECTIONS} | kinds


def render_section(name: str) -> str:
    known = sections()
    if set(known) != loader_sections():
        raise ReferenceDrift(f"the loader's sections {sorted(loader_sections())} and the "
                             f"reference's {sorted(known)} differ: update {__file__}")
    if name not in known:
        raise ReferenceDrift(f"unknown section {name!r} in a config-reference marker "
                             f"(known: {', '.join(sorted(known))})")
    section = known[name]
    return section.render() if isinstance(section, Section) else section()


# --------------------------------------------------------------------- schema registries


def render_schema_registries() -> str:
    """From ``sharedstream.serde.registries`` itself: what it requires, what it defaults,
    what it masks and how the environment names a registry."""
    from sharedstream.serde import registries as r

    try:
        r.resolve_registry("schema_registry_default", {"schema_registry_default": {"x": 1}}, {})
    except r.RegistryConfigError:
        pass
    else:
        raise ReferenceDrift("resolve_registry accepts a registry without url")
    resolved = r.resolve_registry("schema_registry_default",
                                  {"schema_registry_default": {"url": "http://sr:8081"}}, {})
    lines = ["| key | what sharedstream does |", "|---|---|",
             "| `url` | required: the registry's base URL, `http://` or `https://` (several, "
             "comma-separated, are tried in turn); another scheme stops `check` and `run` |"]
    for key in sorted(set(resolved) - {"url"}):
        lines.append(f"| `{key}` | absent → {toml_value(resolved[key])}; a value you set is "
                     "kept |")
    lines.append(f"| `{r.GRACE_KEY}` | sharedstream's own, absent → "
                 f"{toml_value(r.DEFAULT_GRACE_S)}: how long a schema id the registry answers "
                 "404 for holds its messages before they are rejected, when it ends (and "
                 "only once the registry has answered since; [values](values.md#what-"
                 "rejects-a-message-what-holds-it)) |")
    secret_like = ["basic.auth.user.info", "bearer.auth.token", "bearer.auth.client.secret",
                   "ssl.key.password", "url", "ssl.ca.location"]
    masked = r.redacted_registry({k: "x" for k in secret_like})
    hidden = [k for k in secret_like if masked[k] != "x"]
    shown = [k for k in secret_like if masked[k] == "x"]
    var = r.registry_env_var(r.DEFAULT_REGISTRY)
    lines += [
        "",
        "Every other key is handed to `confluent_kafka.schema_registry.SchemaRegistryClient` "
        f"as it is. The default registry id is `{r.DEFAULT_REGISTRY}`; its environment forms "
        f"are `{var}` (a JSON object) and `{var}__<KEY>` (one key, dots as `_`), which win "
        f"over the file key by key. Values of {', '.join(f'`{k}`' for k in hidden)} are "
        f"shown as `***`; {', '.join(f'`{k}`' for k in shown)} are shown.",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- connections


_SAMPLE = {"bootstrap.servers": "kafka-1:9092"}
_CANDIDATES: list[Any] = [False, "false", "FALSE", True, "true", 1, 0, "0", "yes"]


def render_connections() -> str:
    from sharedstream.kafka import connections as c

    helps = docstring_bullets(c.__doc__)
    rows: list[tuple[str, str]] = []

    try:
        c.validate_connection("kafka_default", {})
    except c.ConnectionConfigError:
        rows.append(("bootstrap.servers", "required"))
    else:
        raise ReferenceDrift("validate_connection accepts a config without bootstrap.servers")

    plain = c.consumer_group_id({}, ["orders", "payments"])
    named = c.consumer_group_id({"group.id": "team-a"}, ["payments", "orders"])
    base = plain.split(".", 1)[0]
    rows.append(("group.id", f"absent → `{base}`; topics `orders` and `payments` consume as "
                             f"`{plain}` (with `group.id = \"team-a\"`: `{named}`)"))

    resolved = c.validate_connection("kafka_default", _SAMPLE)
    for key in sorted(set(resolved) - set(_SAMPLE)):
        accepted, refused = [], []
        for candidate in _CANDIDATES:
            try:
                out = c.validate_connection("kafka_default", {**_SAMPLE, key: candidate})
            except c.ConnectionConfigError:
                refused.append(candidate)
            else:
                accepted.append((candidate, out[key]))
        if refused:
            kept = {v for _, v in accepted}
            what = (f"always {toml_value(resolved[key])}" if kept == {resolved[key]}
                    else f"absent → {toml_value(resolved[key])}")
            rows.append((key, f"{what}; accepted: "
                              f"{', '.join(toml_value(a) for a, _ in accepted)}; refused: "
                              f"{', '.join(toml_value(r) for r in refused)}"))
        else:
            rows.append((key, f"absent → {toml_value(resolved[key])}; a value you set is kept"))

    probe = c.validate_connection("kafka_default",
                                  {**_SAMPLE, "oauth_cb": "os.path.basename"})["oauth_cb"]
    if not callable(probe):
        raise ReferenceDrift("validate_connection no longer resolves oauth_cb by dotted path")
    rows.append(("oauth_cb", "a dotted path (`\"pkg.module.function\"`) is imported and "
                             "handed to librdkafka as the callable"))

    producer = c.producer_config(resolved)
    for key in sorted(set(producer) - set(resolved)):
        mine = c.producer_config({**resolved, key: "yours"})[key] == "yours"
        rows.append((key, f"dead-letter producer: absent → {toml_value(producer[key])}"
                          + ("; a value you set is kept" if mine else "")))

    lines = ["| key | what sharedstream does | why |", "|---|---|---|"]
    for key, what in rows:
        if key not in helps:
            raise ReferenceDrift(f"sharedstream.kafka.connections handles {key!r} but its "
                                 f"docstring has no '* ``{key}`` ...' bullet")
        lines.append(f"| `{key}` | {what} | {helps[key]} |")
    unused = sorted(set(helps) - {k for k, _ in rows})
    if unused:
        raise ReferenceDrift(f"sharedstream.kafka.connections documents {unused}, which the "
                             "probes above never met: update the bullets or this hook")

    secret_like = ["sasl.password", "sasl.jaas.config", "ssl.key.password", "ssl.key.pem",
                   "sasl.oauthbearer.client.secret", "oauth.token", "bootstrap.servers",
                   "sasl.username"]
    masked = c.redacted({k: "x" for k in secret_like})
    hidden = [k for k in secret_like if masked[k] != "x"]
    shown = [k for k in secret_like if masked[k] == "x"]
    lines += [
        "",
        f"The environment form of connection `kafka_default` is "
        f"`{c.env_var_name('kafka_default')}` (`{c.ENV_PREFIX}<ID>`, the id upper-cased, "
        "anything but letters and digits turned into `_`). Values of keys such as "
        f"{', '.join(f'`{k}`' for k in hidden)} are replaced by `***` wherever a connection "
        f"is printed or logged; {', '.join(f'`{k}`' for k in shown)} are shown.",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- MkDocs events


_rendered: set[str] = set()


def on_pre_build(config: Any) -> None:
    _rendered.clear()


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Renders every marked section (a drift stops the build) and notes it for the
    coverage check; ``references.py`` puts the tables in the page."""
    for match in MARKER.finditer(markdown):
        _or_plugin_error(render_section, match.group("section"))
        _rendered.add(match.group("section"))
    return markdown


def on_post_build(config: Any) -> None:
    missing = loader_sections() - _rendered
    if missing:
        _fail(f"no page shows the configuration reference of {sorted(missing)}: add "
              "'<!-- config-reference: NAME -->' markers")


def _or_plugin_error(fn: Callable[[str], str], arg: str) -> str:
    try:
        return fn(arg)
    except ReferenceDrift as exc:
        _fail(str(exc))
        raise  # unreachable: _fail raises


def _fail(message: str) -> None:
    from mkdocs.exceptions import PluginError

    raise PluginError(f"configuration reference: {message}")


__all__ = ["MARKER", "ReferenceDrift", "docstring_bullets", "render_section", "sections"]
