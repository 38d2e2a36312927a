"""Every command in the README and docs/ runs as written, as far as it can without services.

From the fenced code blocks of ``README.md`` and ``docs/**/*.md``:

* every ``sharedstream ...`` command (a line starting with it or with ``$ sharedstream``,
  or a part of a line after ``&&``, ``;`` or ``|``) is parsed against the real click
  command tree: each subcommand is resolved, then the command's ``make_context`` runs
  with ``resilient_parsing`` off, so an unknown command or option, a missing argument or
  a value of the wrong type fails. Nothing is invoked, so no service is needed;
* every ``python`` block compiles (top-level ``await`` allowed: the examples show it);
* every ``python -m MODULE``, ``python path/to/file.py`` and ``scripts/NAME`` in a shell
  line names a module or file that exists.

A command that is shown but does not exist fails here before a reader copies it.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from sharedstream.cli import cli

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PUNCTUATION = set("();<>|&")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the block's first content line
    info: str
    text: str


def fenced_blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file, dedented by their fence's indent."""
    blocks: list[Block] = []
    fence: str | None = None
    indent, info, start, body = 0, "", 0, []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.lstrip()
        if fence is None:
            match = re.match(r"(`{3,}|~{3,})\s*([\w+-]*)", stripped)
            if match:
                fence, info = match.group(1), match.group(2).lower()
                indent, start, body = len(line) - len(stripped), number + 1, []
        elif stripped.startswith(fence) and not stripped.strip(fence[0]).strip():
            blocks.append(Block(path, start, info, "\n".join(body)))
            fence = None
        else:
            body.append(line[indent:] if not line[:indent].strip() else line.lstrip())
    assert fence is None, f"{path}: a fenced block opened at line {start - 1} never closes"
    return blocks


def shell_lines(block: Block) -> list[tuple[int, str]]:
    """(line number, logical line) of a non-Python block, continuations joined."""
    out: list[tuple[int, str]] = []
    pending, first = "", 0
    for offset, raw in enumerate(block.text.splitlines()):
        if not pending:
            first = block.line + offset
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        out.append((first, (pending + raw).strip()))
        pending = ""
    if pending:
        out.append((first, pending.strip()))
    return out


def sharedstream_commands(line: str) -> list[list[str]]:
    """The argument lists of every ``sharedstream`` command on one shell line."""
    if line.startswith("$ "):
        line = line[2:]
    if "sharedstream" not in line:
        return []
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        if line.startswith("sharedstream "):
            raise
        return []  # not shell (a diagram, say) and no command at its start
    commands, segment = [], []
    for token in [*tokens, ";"]:
        if set(token) <= PUNCTUATION:
            words = segment
            while words and re.fullmatch(r"[A-Za-z_]\w*=.*", words[0]):
                words = words[1:]  # VAR=value prefixes
            if words and words[0] == "sharedstream":
                commands.append(words[1:])
            segment = []
        else:
            segment.append(token)
    return commands


def _left_over(ctx: click.Context) -> list[str]:
    """What a group's parser left for its subcommand (the name first)."""
    protected = ctx.__dict__.get("_protected_args")
    if protected is None:  # click < 8.2
        protected = ctx.protected_args
    return [*protected, *ctx.args]


def parse(args: list[str]) -> None:
    """Resolve ``sharedstream ARGS`` through the real command tree; run nothing."""
    command: click.Command = cli
    name, parent, rest = "sharedstream", None, list(args)
    try:
        while True:
            ctx = command.make_context(name, rest, parent=parent, resilient_parsing=False)
            if not isinstance(command, click.Group):
                return
            rest = _left_over(ctx)
            sub = command.get_command(ctx, rest[0])
            if sub is None:
                raise click.UsageError(f"no such command {rest[0]!r}", ctx)
            name, parent, command, rest = rest[0], ctx, sub, rest[1:]
    except click.exceptions.Exit as done:  # --help or --version: parsed, shown, done
        if done.exit_code != 0:
            raise


def collect() -> tuple[list[tuple[str, list[str]]], list[Block], list[tuple[str, str]]]:
    """(where, args) of every command; the Python blocks; (where, shell line) of the rest."""
    commands: list[tuple[str, list[str]]] = []
    python: list[Block] = []
    lines: list[tuple[str, str]] = []
    for path in DOCUMENTS:
        for block in fenced_blocks(path):
            if block.info in ("python", "py"):
                python.append(block)
                continue
            for number, line in shell_lines(block):
                where = f"{path.relative_to(ROOT)}:{number}"
                lines.append((where, line))
                commands.extend((where, args) for args in sharedstream_commands(line))
    return commands, python, lines


COMMANDS, PYTHON_BLOCKS, SHELL_LINES = collect()


def test_the_documents_show_commands_at_all() -> None:
    """Guards the extraction: a parser that found nothing would pass every case below."""
    assert len(COMMANDS) >= 40
    shown = {" ".join(args[:2]) for _, args in COMMANDS}
    assert {"demo", "run examples/orders_watchers.py", "dlq replay", "events list"} <= shown
    readme = [args for where, args in COMMANDS if where.startswith("README.md")]
    assert ["demo"] in readme  # the front page's first command, after `pip install -e . &&`
    assert len(PYTHON_BLOCKS) >= 5


@pytest.mark.parametrize(("where", "args"), COMMANDS,
                         ids=[f"{w} sharedstream {' '.join(a)}"[:120] for w, a in COMMANDS])
def test_every_documented_command_parses(where: str, args: list[str]) -> None:
    try:
        parse(args)
    except click.ClickException as exc:
        pytest.fail(f"{where}: `sharedstream {shlex.join(args)}` does not parse: "
                    f"{exc.format_message()}")


@pytest.mark.parametrize("block", PYTHON_BLOCKS,
                         ids=[f"{b.path.relative_to(ROOT)}:{b.line}" for b in PYTHON_BLOCKS])
def test_every_python_example_compiles(block: Block) -> None:
    compile(block.text, f"{block.path.relative_to(ROOT)}:{block.line}", "exec",
            flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)


def declared_distributions() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = [*project["dependencies"],
             *(s for extra in project["optional-dependencies"].values() for s in extra)]
    return {re.split(r"[\[<>=!~; ]", spec, maxsplit=1)[0].lower().replace("_", "-")
            for spec in specs}


def module_exists(module: str) -> bool:
    local = ROOT / Path(*module.split("."))
    if local.with_suffix(".py").is_file() or (local / "__main__.py").is_file():
        return True
    top = module.split(".")[0]
    # An installed tool (pytest), or one the project declares in an extra (mkdocs).
    return importlib.util.find_spec(top) is not None or top in declared_distributions()


REFERENCES = [(where, kind, name) for where, line in SHELL_LINES
              for kind, name in (
                  *(("module", m) for m in re.findall(r"\bpython3?\s+-m\s+([\w.]+)", line)),
                  *(("file", f) for f in re.findall(r"\bpython3?\s+((?:[\w.-]+/)+[\w.-]+\.py)\b",
                                                    line)),
                  *(("file", s) for s in re.findall(r"(?<![\w./-])(scripts/[\w.-]+)", line)))]


def test_the_documents_name_scripts_and_modules() -> None:
    kinds = {kind for _, kind, _ in REFERENCES}
    assert kinds == {"module", "file"}


@pytest.mark.parametrize(("where", "kind", "name"), REFERENCES,
                         ids=[f"{w} {n}" for w, _, n in REFERENCES])
def test_every_named_script_and_module_exists(where: str, kind: str, name: str) -> None:
    if kind == "module":
        assert module_exists(name), f"{where}: `python -m {name}`: no such module"
    else:
        assert (ROOT / name).exists(), f"{where}: {name} does not exist"


def test_the_configuration_reference_renders_from_the_settings() -> None:
    """The manual's configuration tables build (no option without help, no stale bullet)."""
    spec = importlib.util.spec_from_file_location(
        "config_reference", ROOT / "docs" / "hooks" / "config_reference.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    for section in hook.sections():
        table = hook.render_section(section)
        assert table.count("\n|") >= 2, section
    assert "SHAREDSTREAM__TRIGGERER__MAX_IN_FLIGHT" in hook.render_section("triggerer")
