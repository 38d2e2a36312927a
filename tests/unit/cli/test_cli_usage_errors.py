"""A usage error is one ``error:`` line naming the problem and where help is, exit 2
(issue 41: click's three-line usage block with a capital "Error:" was the one bad input
left that did not follow the rule)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from sharedstream.cli import cli

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("args", "names"), [
    (["events", "list", "--limit", "-5"], "'--limit'"),
    (["audit", "list", "--limit", "abc"], "'--limit'"),
    (["state-store", "clean", "--batch-size", "-1"], "'--batch-size'"),
    (["offsets", "reset"], "'--to'"),
    (["--bogus"], "--bogus"),
    (["no-such-command"], "no-such-command"),
    (["events", "list", "--nope"], "--nope"),
])
def test_a_usage_error_is_one_error_line_exit_2(args: list[str], names: str) -> None:
    result = CliRunner().invoke(cli, args)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert names in lines[0] and "--help'" in lines[0]
