"""``[destinations.<id>]`` as the loader reads it: kinds, globs, secrets from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedstream.delivery.settings import (
    AirflowDestination,
    KafkaDestination,
    WebhookDestination,
)
from sharedstream.triggerer.config import ConfigError, load_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sharedstream.toml"
    path.write_text(text)
    return path


def test_each_kind_with_its_options_and_the_common_ones(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, '''
[airflow.prod]
base_url = "http://airflow:8080"
token = "t"

[destinations.dags]
kind = "airflow"
instance = "prod"
assets = ["orders_*"]
pace_seconds = 2.0
asset_map = { orders_eu = "orders" }

[destinations.hooks]
kind = "webhook"
url = "https://hooks.example/in"
secret = "from-file"

[destinations.events]
kind = "kafka"
topic = "asset-events"
start = "earliest"
batch_size = 50
'''), env={})
    dags, hooks, events = (config.destinations[k] for k in ("dags", "hooks", "events"))
    assert dags.options == AirflowDestination(instance="prod", pace_seconds=2.0,
                                              asset_map={"orders_eu": "orders"})
    assert dags.common.assets == ["orders_*"] and dags.common.start == "latest"
    assert hooks.options == WebhookDestination(url="https://hooks.example/in",
                                               secret="from-file")
    assert "from-file" not in repr(hooks)
    assert events.options == KafkaDestination(topic="asset-events")
    assert (events.common.start, events.common.batch_size) == ("earliest", 50)


def test_a_secret_comes_from_the_environment_one_key_at_a_time(tmp_path: Path) -> None:
    path = write(tmp_path, '[destinations.hooks]\nkind = "webhook"\n'
                           'url = "https://hooks.example/in"\n')
    config = load_config(path, env={"SHAREDSTREAM__DESTINATIONS__HOOKS__SECRET": "s3cret",
                                    "SHAREDSTREAM__DESTINATIONS__HOOKS__ASSETS": '["a", "b"]'})
    hooks = config.destinations["hooks"]
    assert isinstance(hooks.options, WebhookDestination) and hooks.options.secret == "s3cret"
    assert hooks.common.assets == ["a", "b"]


@pytest.mark.parametrize("text, env, message", [
    ('[destinations.x]\nurl = "http://h"\n', {}, r"\[destinations.x\] .*missing kind"),
    ('[destinations.x]\nkind = "pigeon"\n', {}, r"kind must be one of airflow, webhook, kafka"),
    ('[destinations.x]\nkind = "webhook"\nurl = "http://h"\n', {},
     r"\[destinations.x\] .*secret"),
    ('[destinations.x]\nkind = "kafka"\ntopic = "t"\nsecret = "s"\n', {},
     r"\[destinations.x\] secret .*unknown option"),
    ('[destinations.x]\nkind = "airflow"\ninstance = "prod"\n', {},
     r"\[destinations.x\] .*instance 'prod' has no \[airflow.prod\] section"),
    ('[destinations.x]\nkind = "kafka"\ntopic = "t"\n',
     {"SHAREDSTREAM__DESTINATIONS__X__BATCH_SIZE": "lots"},
     r"SHAREDSTREAM__DESTINATIONS__X__BATCH_SIZE: expected int"),
])
def test_a_wrong_table_is_one_error_naming_it(tmp_path: Path, text: str, env: dict[str, str],
                                               message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(write(tmp_path, text), env=env)
    assert "s3cret" not in str(caught.value)
