"""The command line's options: every one explained, one name per meaning, old names kept."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest

from sharedstream.cli import cli


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
