from __future__ import annotations

from pathlib import Path

import pytest

from sharedstream.triggerer.config import DEFAULT_DATABASE_URL, ConfigError, load_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sharedstream.toml"
    path.write_text(text)
    return path


def test_defaults_without_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(env={})
    assert config.path is None
    assert config.database.url == DEFAULT_DATABASE_URL
    assert config.manager.subscriber_queue_size == 1024
    assert config.manager.ack_timeout == 300.0
    assert config.manager.cohort_grace_period == 10.0
    assert config.manager.max_attempts == 10
    assert config.process.shutdown_timeout == 30.0
    assert config.state_store.default_retention_days == 30
    assert config.state_store.max_value_storage_bytes == 65535
    assert config.state_store.clear_on_success is False
    assert config.state_store.state_cleanup_batch_size == 0
    assert config.state_store.sqlite_busy_timeout == 30.0


def test_full_file(tmp_path: Path) -> None:
    path = write(tmp_path, '''
[database]
url = "postgresql+psycopg://u@localhost/db"
[triggerer]
subscriber_queue_size = 64
max_in_flight = 500
shutdown_timeout = 5
health_port = 0
[state_store]
default_retention_days = 7
state_cleanup_batch_size = 1000
[workers]
state_backend = "sharedstream.statestore.payload.FilesystemPayloadBackend"
state_dir = "/var/lib/sharedstream"
[connections.kafka_default]
"bootstrap.servers" = "localhost:9092"
"group.id" = "triggerer"
''')
    config = load_config(path, env={})
    assert config.database.url.startswith("postgresql+psycopg://")
    assert config.manager.subscriber_queue_size == 64
    assert config.manager.max_in_flight == 500
    assert config.process.shutdown_timeout == 5.0
    assert config.state_store.default_retention_days == 7
    assert config.state_store.payload_backend is not None
    assert config.state_store.payload_dir == "/var/lib/sharedstream"
    assert config.connections["kafka_default"]["bootstrap.servers"] == "localhost:9092"


def test_env_overrides_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[triggerer]\nack_timeout = 10\n")
    config = load_config(path, env={"SHAREDSTREAM__TRIGGERER__ACK_TIMEOUT": "20",
                                    "SHAREDSTREAM__DATABASE__URL": "sqlite:///x.db"})
    assert config.manager.ack_timeout == 20.0
    assert config.database.url == "sqlite:///x.db"


def test_config_env_var_names_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[state_store]\ndefault_retention_days = 3\n")
    config = load_config(env={"SHAREDSTREAM_CONFIG": str(path)})
    assert config.state_store.default_retention_days == 3


@pytest.mark.parametrize(("text", "message"), [
    ("[triggerer]\nsubscriber_queue_sise = 1\n",
     r"\[triggerer\] subscriber_queue_sise in .*sharedstream.toml: unknown option"),
    ("[triggerer]\nmax_attempts = 0\n", r"\[triggerer\] in .*: max_attempts must be an int >= 1"),
    ("[triggerer]\nack_timeout = \"5m\"\n", r"\[triggerer\] ack_timeout .*expected float"),
    ("[state_store]\ndefault_retention_days = -1\n", "default_retention_days must be >= 0"),
    ("[state_store]\nbackend = \"\"\n", "backend is set but empty"),
    ("[state_store]\nsqlite_busy_timeout = -1\n", "sqlite_busy_timeout must be a number"),
    ("[workers]\nstate_backend = \"\"\n", "state_backend is set but empty"),
    ("[database]\nurl = \"\"\n", "url must not be empty"),
    ("[databse]\nurl = \"x\"\n", r"\[databse\] .*unknown section"),
    ("[connections]\nkafka_default = 1\n", r"\[connections.kafka_default\] .*expected a table"),
])
def test_invalid_options_name_key_and_file(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=message):
        load_config(path, env={})


def test_unknown_env_option_names_variable() -> None:
    with pytest.raises(ConfigError, match="SHAREDSTREAM__TRIGGERER__NOPE: unknown option"):
        load_config(env={"SHAREDSTREAM__TRIGGERER__NOPE": "1"})


def test_explicit_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "absent.toml", env={})


def test_secret_in_database_url_not_echoed(tmp_path: Path) -> None:
    path = write(tmp_path, '[database]\nurl = 5\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, env={"SHAREDSTREAM__DATABASE__URL": "[\"postgresql://u:hunter2@h/db\"]"})
    assert "hunter2" not in str(info.value)
