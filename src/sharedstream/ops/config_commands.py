"""``sharedstream config show``: the effective configuration and where each value came from."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.table import Table

from sharedstream.ops.clitools import console, emit_json, handled


@click.group("config")
def config_group() -> None:
    """The configuration: what is in effect, and from where."""


@config_group.command("show")
@click.option("--config", "config_path", metavar="PATH", type=click.Path(dir_okay=False),
              help="sharedstream.toml (default: $SHAREDSTREAM_CONFIG or ./sharedstream.toml).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handled
def config_show(config_path: str | None, as_json: bool) -> None:
    """Print every option in effect, secrets masked, with its source: the environment
    variable that set it, the config file, or `default`.

    Connections show what the file and the environment give; `run` adds its fixed
    settings to them (see the configuration reference).
    """
    from sharedstream.triggerer.config_view import effective_settings

    config, settings = effective_settings(config_path)
    if as_json:
        emit_json({"file": str(config.path) if config.path else None,
                   "settings": [{"section": s.section, "key": s.key, "value": s.value,
                                 "source": s.source} for s in settings]})
        return
    table = Table(title=f"effective configuration ({config.path or 'no file: defaults'})")
    for column in ("section", "key", "value", "source"):
        table.add_column(column, overflow="fold")
    for s in settings:
        table.add_row(s.section, s.key, _text(s.value), s.source)
    console.print(table)


def _text(value: Any) -> str:
    """A value as the config file spells it (``false``, ``["a", "b"]``), text unquoted;
    Python's ``False`` or ``['a']`` is not something an operator can paste back."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
