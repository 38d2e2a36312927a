"""Install hints that work for the way sharedstream was installed (issue 29): an index
install is told ``pip install 'sharedstream[web]'``, a source checkout the path of its
checkout (``sharedstream[web]`` from an index is not the code it runs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sharedstream.cli import cli
from sharedstream.core.install import install_command

CHECKOUT = Path(__file__).resolve().parents[3]


def test_this_checkout_is_told_to_install_the_extra_from_itself(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # "not installed"
    result = CliRunner().invoke(cli, ["web", "--database-url", f"sqlite:///{tmp_path / 'x.db'}"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: the Python module 'uvicorn' is not installed: "
        f"pip install -e '{CHECKOUT}[web]'"]


def test_a_postgresql_url_without_its_driver_names_the_same_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    result = CliRunner().invoke(cli, ["db", "current", "--database-url",
                                      "postgresql+psycopg://u@127.0.0.1:1/x"])
    assert result.exit_code == 2, result.output
    assert f"pip install -e '{CHECKOUT}[postgres]'" in result.stderr
    assert "sharedstream[postgres]" not in result.stderr


@pytest.mark.parametrize("direct_url, expected", [
    (None, "pip install 'sharedstream[web]'"),
    ({"url": "https://files.example/sharedstream-1.0.tar.gz", "archive_info": {}},
     "pip install 'sharedstream[web]'"),
    ({"url": "file:///src/sharedstream", "dir_info": {"editable": True}},
     "pip install -e '/src/sharedstream[web]'"),
    ({"url": "file:///src/shared%20stream", "dir_info": {}},
     "pip install '/src/shared stream[web]'"),
])
def test_the_command_follows_the_install_record(direct_url: dict[str, object] | None,
                                                 expected: str) -> None:
    text = None if direct_url is None else json.dumps(direct_url)
    assert install_command("web", text) == expected
