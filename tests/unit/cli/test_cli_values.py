"""CLI consistency (issue 29): values printed as TOML/JSON spell them, errors name commands."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sharedstream.cli import cli


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SHAREDSTREAM_CONFIG", raising=False)
    return CliRunner()


def test_config_show_prints_booleans_as_the_file_spells_them(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["config", "show"])
    assert result.exit_code == 0, result.output
    assert "False" not in result.stdout and "True" not in result.stdout
    assert "false" in result.stdout or "true" in result.stdout


def test_setting_null_names_the_delete_command(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    assert runner.invoke(cli, ["db", "upgrade", "--database-url", url]).exit_code == 0
    result = runner.invoke(cli, ["state-store", "set", "k", "null", "--asset", "a",
                                 "--database-url", url])
    assert result.exit_code == 2, result.output
    assert "delete()" not in result.output
    assert "sharedstream state-store delete" in result.stderr
    assert "Traceback" not in result.output
