"""Connection resolution and validation: the auto-commit table, defaults, secrets."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from sharedstream.kafka.connections import (
    ConnectionConfigError,
    consumer_group_id,
    env_var_name,
    producer_config,
    redacted,
    resolve_connection,
)

BASE = {"bootstrap.servers": "b:9092", "group.id": "app", "sasl.password": "hunter2"}


@pytest.mark.parametrize("value", [True, "True", "true", 1, "1", "yes", 0, "0", "no", None])
def test_auto_commit_anything_but_false_is_refused_naming_the_connection(value: Any) -> None:
    with pytest.raises(ConnectionConfigError) as info:
        resolve_connection("prod", {"prod": {**BASE, "enable.auto.commit": value}})
    assert "'prod'" in str(info.value) and "enable.auto.commit" in str(info.value)
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("value", [False, "false", "FALSE", "False"])
def test_auto_commit_false_is_accepted(value: Any) -> None:
    assert (
        resolve_connection("c", {"c": {**BASE, "enable.auto.commit": value}})["enable.auto.commit"]
        is False
    )


def test_defaults_are_applied() -> None:
    cfg = resolve_connection("c", {"c": BASE})
    assert cfg["enable.auto.commit"] is False
    assert cfg["enable.auto.offset.store"] is False
    assert cfg["auto.offset.reset"] == "earliest"
    assert (
        resolve_connection("c", {"c": {**BASE, "auto.offset.reset": "latest"}})["auto.offset.reset"]
        == "latest"
    )


def test_offset_store_cannot_be_turned_on() -> None:
    with pytest.raises(ConnectionConfigError, match=r"enable\.auto\.offset\.store"):
        resolve_connection("c", {"c": {**BASE, "enable.auto.offset.store": "true"}})


def test_environment_json_is_used_when_the_file_has_no_entry() -> None:
    env = {"SHAREDSTREAM_CONN_KAFKA_DEFAULT": json.dumps(BASE)}
    assert env_var_name("kafka_default") == "SHAREDSTREAM_CONN_KAFKA_DEFAULT"
    assert resolve_connection("kafka_default", {}, env)["group.id"] == "app"
    with pytest.raises(ConnectionConfigError, match="kafka_default"):
        resolve_connection(
            "kafka_default",
            {},
            {"SHAREDSTREAM_CONN_KAFKA_DEFAULT": json.dumps({**BASE, "enable.auto.commit": 1})},
        )


def test_broken_environment_json_does_not_echo_secrets() -> None:
    env = {"SHAREDSTREAM_CONN_X": '{"sasl.password": "hunter2",'}
    with pytest.raises(ConnectionConfigError) as info:
        resolve_connection("x", {}, env)
    assert "hunter2" not in str(info.value) and "SHAREDSTREAM_CONN_X" in str(info.value)


def test_missing_connection_names_both_sources() -> None:
    with pytest.raises(ConnectionConfigError, match=r"connections\.nope.*SHAREDSTREAM_CONN_NOPE"):
        resolve_connection("nope", {}, {})


def test_consumer_group_is_per_sorted_topic_set() -> None:
    assert consumer_group_id(BASE, ["b", "a"]) == "app.a+b"
    assert consumer_group_id({}, ["t"]) == "sharedstream.t"


def test_secrets_are_redacted_and_consumer_keys_stay_off_the_producer() -> None:
    assert redacted(BASE)["sasl.password"] == "***"
    assert redacted({"ssl.key.password": "k"})["ssl.key.password"] == "***"
    out = producer_config(resolve_connection("c", {"c": BASE}))
    assert "group.id" not in out and "enable.auto.commit" not in out
    assert out["acks"] == "all" and out["enable.idempotence"] is True


def test_the_environment_wins_over_the_file_key_by_key() -> None:
    file = {"c": {"bootstrap.servers": "file:9092", "sasl.username": "app"}}
    env = {"SHAREDSTREAM_CONN_C": json.dumps({"bootstrap.servers": "env:9092"}),
           "SHAREDSTREAM_CONN_C__SASL_PASSWORD": "s3cret",
           "SHAREDSTREAM_CONN_C__SECURITY_PROTOCOL": "SASL_SSL"}
    out = resolve_connection("c", file, env)
    assert out["bootstrap.servers"] == "env:9092" and out["sasl.username"] == "app"
    assert out["sasl.password"] == "s3cret" and out["security.protocol"] == "SASL_SSL"


def test_one_variable_per_key_is_a_whole_connection() -> None:
    out = resolve_connection("kafka_default", {},
                             {"SHAREDSTREAM_CONN_KAFKA_DEFAULT__BOOTSTRAP_SERVERS": "k:9092"})
    assert out["bootstrap.servers"] == "k:9092"


def test_an_airflow_connection_is_reused_as_it_is() -> None:
    airflow = json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": "af:9092",
                                                          "group.id": "af"}})
    assert resolve_connection("kafka_default", {}, {"AIRFLOW_CONN_KAFKA_DEFAULT": airflow})[
        "bootstrap.servers"] == "af:9092"
    # The same shape in our own variable, with extra as a JSON string (as Airflow writes it).
    shaped = json.dumps({"conn_type": "kafka", "extra": json.dumps({"bootstrap.servers": "x:1"})})
    assert resolve_connection("c", {}, {"SHAREDSTREAM_CONN_C": shaped})["bootstrap.servers"] \
        == "x:1"


def test_an_airflow_connection_of_another_type_is_refused_by_name() -> None:
    with pytest.raises(ConnectionConfigError, match=r"'c'.*type 'postgres', not 'kafka'"):
        resolve_connection("c", {}, {"AIRFLOW_CONN_C": json.dumps(
            {"conn_type": "postgres", "password": "s3cret"})})


def test_oauth_cb_is_a_dotted_path_to_a_function() -> None:
    out = resolve_connection("c", {"c": {**BASE, "oauth_cb": "os.path.basename"}})
    assert out["oauth_cb"] is os.path.basename
    with pytest.raises(ConnectionConfigError, match=r"'c': oauth_cb: 'nope.fn' cannot be"):
        resolve_connection("c", {"c": {**BASE, "oauth_cb": "nope.fn"}})
