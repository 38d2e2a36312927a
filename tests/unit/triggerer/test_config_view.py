"""``config show``: every value in effect, where it came from, secrets masked."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sharedstream.cli import cli
from sharedstream.triggerer.config_view import effective_settings


def test_each_value_names_its_source_and_secrets_are_masked(tmp_path: Path) -> None:
    path = tmp_path / "sharedstream.toml"
    path.write_text('[database]\nurl = "postgresql+psycopg://app:s3cret@db/x"\n'
                    '[triggerer]\nack_timeout = 60.0\n'
                    '[connections.kafka_default]\n"bootstrap.servers" = "file:9092"\n'
                    '"sasl.username" = "app"\n')
    env = {"SHAREDSTREAM__TRIGGERER__MAX_IN_FLIGHT": "77",
           "SHAREDSTREAM_CONN_KAFKA_DEFAULT__SASL_PASSWORD": "s3cret",
           "SHAREDSTREAM_CONN_KAFKA_DEFAULT": json.dumps({"bootstrap.servers": "env:9092"})}
    _config, settings = effective_settings(path, env)
    shown = {(s.section, s.key): (s.value, s.source) for s in settings}
    assert shown["database", "url"] == ("postgresql+psycopg://app:***@db/x", str(path))
    assert shown["triggerer", "ack_timeout"] == (60.0, str(path))
    assert shown["triggerer", "max_in_flight"] == (77, "SHAREDSTREAM__TRIGGERER__MAX_IN_FLIGHT")
    assert shown["triggerer", "max_attempts"][1] == "default"
    assert shown["connections.kafka_default", "bootstrap.servers"] == (
        "env:9092", "SHAREDSTREAM_CONN_KAFKA_DEFAULT")
    assert shown["connections.kafka_default", "sasl.username"] == ("app", str(path))
    assert shown["connections.kafka_default", "sasl.password"] == (
        "***", "SHAREDSTREAM_CONN_KAFKA_DEFAULT__SASL_PASSWORD")
    assert "s3cret" not in repr(settings)


def test_the_command_prints_json_without_secrets(tmp_path: Path) -> None:
    path = tmp_path / "sharedstream.toml"
    path.write_text('[database]\nurl = "postgresql+psycopg://app:s3cret@db/x"\n')
    result = CliRunner().invoke(cli, ["config", "show", "--config", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert "s3cret" not in result.stdout
    assert json.loads(result.stdout)["file"] == str(path)
