"""The command line's options: every one explained, one name per meaning, old names kept."""

from __future__ import annotations

import re
from collections.abc import Iterator

import click
import pytest

from sharedstream.cli import cli
from sharedstream.ops.clitools import RenamedOption


def commands() -> Iterator[tuple[str, click.Command]]:
    ctx = click.Context(cli)

    def walk(command: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None
                yield from walk(sub, f"{path} {name}".strip())
        else:
            yield path, command

    yield from walk(cli, "")


def test_every_option_has_help() -> None:
    missing = [f"{path} {p.opts[0]}" for path, command in commands() for p in command.params
               if isinstance(p, click.Option) and not p.help]
    assert missing == []


def test_to_is_a_position_everywhere() -> None:
    """``--to`` once meant a position (offsets reset) and a topic (dlq replay)."""
    meanings = {path: p for path, command in commands() for p in command.params
                if isinstance(p, click.Option) and p.opts[0] == "--to"}
    assert list(meanings) == ["offsets reset"]


@pytest.mark.parametrize("old, new", [("--to", "--to-topic"),
                                      ("--filter-watcher", "--watcher"),
                                      ("--filter-reason", "--reason")])
def test_renamed_options_still_parse_but_help_shows_the_new_name(old: str, new: str) -> None:
    replay = cli.get_command(click.Context(cli), "dlq").get_command(  # type: ignore[union-attr]
        click.Context(cli), "replay")
    assert replay is not None
    parsed = replay.make_context("replay", ["orders.dlq", old, "x"])
    assert parsed.params == replay.make_context("replay", ["orders.dlq", new, "x"]).params
    text = replay.get_help(click.Context(replay, info_name="replay"))
    assert new in text and old + " " not in text


# One concept, one option name (issue 29): each concept's name, the other spellings it
# must not take (an old one may stay as a hidden RenamedOption alias), and the words of
# a help text that says the concept, so a new option spelt another way fails here too.
CONCEPTS: dict[str, tuple[set[str], str]] = {
    "--limit": ({"-n", "--lines", "--max", "--count", "--head", "--num", "--max-records"},
                r"^(how many|(read )?at most (N|this many))\b(?! \w+ per)"),
    "--since": ({"--from", "--after", "--start", "--since-id", "--cursor", "--newer-than"},
                r"^(Only|Start at)\b.*\b(at or after|after (ID|this id))\b"),
    "--json": ({"--as-json", "--format", "--output", "-o", "-j"}, r"^Print\b.*\bJSON\b"),
    "--yes": ({"-y", "--force", "--assume-yes", "--no-confirm", "--no-prompt"},
              r"\bconfirm"),
    "--dry-run": ({"--dry", "--preview", "--simulate", "--plan", "--noop"},
                  r"\b(what would|make none|produce and commit nothing)\b"),
    "--group": ({"-g", "--group-id", "--consumer-group"}, r"^Kafka consumer group\b"),
    "--watcher": ({"-w", "--filter-watcher", "--watcher-id", "--watcher-name"},
                  r"^Only\b.*\bwatcher W\b"),
    "--config": ({"-c", "--conf", "--config-file", "--settings"}, r"^sharedstream\.toml\b"),
}


def spellings(option: click.Option) -> set[str]:
    """The names ``--help`` shows: an old spelling kept by RenamedOption is hidden."""
    names = set(option.opts[:1] if isinstance(option, RenamedOption) else option.opts)
    return names | set(option.secondary_opts)


def test_one_spelling_per_concept() -> None:
    clashes = []
    for path, command in commands():
        for p in command.params:
            if not isinstance(p, click.Option):
                continue
            for name, (others, says) in CONCEPTS.items():
                if spellings(p) & others:
                    clashes.append(f"{path} {'/'.join(p.opts)}: spell it {name}")
                elif re.search(says, p.help or "", re.IGNORECASE) and name not in p.opts:
                    clashes.append(f"{path} {p.opts[0]} says {name} in its help: {p.help}")
    assert clashes == []


def test_the_concept_table_catches_the_old_tail_spelling() -> None:
    """``events tail -n/--lines`` before it became ``--limit``: the table must name it."""
    old = click.Option(["-n", "--lines"], help="How many of the newest events to print.")
    others, says = CONCEPTS["--limit"]
    assert spellings(old) & others and re.search(says, old.help or "", re.IGNORECASE)
