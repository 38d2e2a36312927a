"""The generated references, committed in the Markdown so they read on GitHub too.

A generated block sits between an opening and a closing marker, each on a line of
its own::

    <!-- config-reference: triggerer -->
    | option | ... |
    <!-- /config-reference -->

Kinds: ``config-reference: SECTION`` (the settings dataclasses, through
``config_reference.py``), ``metrics-reference`` (the metric catalog, through
``metrics_reference.py``), ``cli-reference`` (every command's ``--help``, from the
click commands) and ``values-reference`` (the Helm chart's values.yaml, through
``values_reference.py``). ``python3 docs/hooks/references.py`` writes every block afresh;
``--check`` only says which pages are stale (exit 1), as
``tests/unit/test_docs_references.py`` does in CI. As a MkDocs hook it renders each
block afresh too, so the built site can never show a stale copy.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

_HOOKS = Path(__file__).resolve().parent
_ROOT = _HOOKS.parents[1]
if str(_ROOT / "src") not in sys.path:
    sys.path.append(str(_ROOT / "src"))

BLOCK = re.compile(r"^<!-- (?P<kind>[a-z]+-reference)(?::[ \t]*(?P<arg>[\w.<>]+))?[ \t]*-->\n"
                   r"(?P<body>.*?)^<!-- /(?P=kind) -->[ \t]*$", re.M | re.S)


def _hook(name: str) -> ModuleType:
    """A sibling hook module, by path: MkDocs loads hooks as files, not as a package."""
    spec = importlib.util.spec_from_file_location(f"_reference_{name}", _HOOKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def render(kind: str, arg: str | None) -> str:
    """The body of one block, without its markers."""
    if kind == "config-reference" and arg is not None:
        text: str = _hook("config_reference").render_section(arg)
        return text
    if kind == "metrics-reference" and arg is None:
        text = _hook("metrics_reference").render_metrics()
        return text
    if kind == "cli-reference" and arg is None:
        return "\n".join(cli_reference())
    if kind == "values-reference" and arg is None:
        text = _hook("values_reference").render_values()
        return text
    raise ValueError(f"unknown generated block <!-- {kind}{': ' + arg if arg else ''} -->")


def cli_reference() -> Iterator[str]:
    """Every command as ``--help`` shows it: usage, text, and a table of its options
    (old spellings an option keeps are hidden, as in ``--help``)."""
    import click

    from sharedstream.cli import cli

    def walk(command: click.Command, parent: click.Context | None, name: str
             ) -> Iterator[str]:
        ctx = click.Context(command, info_name=name, parent=parent, **command.context_settings)
        path = ctx.command_path
        yield f"## `{path}`"
        yield ""
        yield f"`{command.get_usage(ctx).removeprefix('Usage: ')}`"
        yield ""
        if command.help:
            yield inspect.cleandoc(command.help).replace("\b\n", "")
            yield ""
        # The help option from the context, not the command's cached one: click caches it
        # per command from whichever context asked first (a test invoking a subcommand
        # alone caches it without -h), which would make this page depend on test order.
        # Options only: recent click releases give arguments a help record too; the usage line
        # above already names them.
        options = (p for p in command.params if isinstance(p, click.Option))
        rows = [r for r in (p.get_help_record(ctx) for p in options) if r]
        if ctx.help_option_names and command.add_help_option:
            rows.append((", ".join(ctx.help_option_names), "Show this message and exit."))
        if rows:
            yield "| option | meaning |"
            yield "|---|---|"
            for names, text in rows:
                yield f"| `{_cell(names)}` | {_cell(text)} |"
            yield ""
        if isinstance(command, click.Group):
            for sub in command.list_commands(ctx):
                found = command.get_command(ctx, sub)
                if found is not None and not found.hidden:
                    yield from walk(found, ctx, sub)

    lines = list(walk(cli, None, "sharedstream"))
    yield from lines[:-1] if lines and lines[-1] == "" else lines


def _cell(text: str) -> str:
    """One table cell: on one line, its pipes escaped (code spans included, as GFM wants)."""
    return " ".join(text.split()).replace("|", "\\|")


def refresh(markdown: str) -> str:
    """``markdown`` with every generated block rendered afresh."""
    def replace(match: re.Match[str]) -> str:
        kind, arg = match.group("kind"), match.group("arg")
        opening = f"<!-- {kind}{': ' + arg if arg else ''} -->"
        return f"{opening}\n\n{render(kind, arg)}\n\n<!-- /{kind} -->"

    return BLOCK.sub(replace, markdown)


def pages() -> list[Path]:
    return sorted((_ROOT / "docs").glob("*.md"))


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return refresh(markdown)


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    stale = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        fresh = refresh(text)
        if fresh != text:
            stale.append(page.relative_to(_ROOT))
            if not check:
                page.write_text(fresh, encoding="utf-8")
    for page in stale:
        print(f"{'stale' if check else 'rewrote'}: {page}")
    if check and stale:
        print("error: generated references are stale: run python3 docs/hooks/references.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
