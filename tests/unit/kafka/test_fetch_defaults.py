"""sharedstream's own librdkafka fetch defaults (issue 27): set when absent, yours win."""

from __future__ import annotations

from sharedstream.kafka.connections import (
    FETCH_QUEUE_BACKOFF_MS,
    RECONNECT_BACKOFF_MS,
    client_config,
    resolve_connection,
    validate_connection,
)


def test_absent_fetch_queue_backoff_gets_sharedstreams_default() -> None:
    config = validate_connection("kafka_default", {"bootstrap.servers": "k:9092"})
    assert config["fetch.queue.backoff.ms"] == FETCH_QUEUE_BACKOFF_MS == 100


def test_an_explicit_fetch_queue_backoff_wins_from_file_and_environment() -> None:
    file = {"kafka_default": {"bootstrap.servers": "k:9092", "fetch.queue.backoff.ms": 1000}}
    assert resolve_connection("kafka_default", file, {})["fetch.queue.backoff.ms"] == 1000
    env = {"SHAREDSTREAM_CONN_KAFKA_DEFAULT__FETCH_QUEUE_BACKOFF_MS": "250"}
    assert resolve_connection("kafka_default", file, env)["fetch.queue.backoff.ms"] == "250"


def test_producer_and_admin_clients_do_not_get_the_consumer_default() -> None:
    config = validate_connection("kafka_default", {"bootstrap.servers": "k:9092"})
    assert "fetch.queue.backoff.ms" not in client_config(config)


def test_absent_reconnect_backoff_gets_sharedstreams_default_in_every_client() -> None:
    """Issue 43: librdkafka waits about half of ``reconnect.backoff.ms`` before its first
    connection to each broker the metadata names; 100 ms (its default) cost every new
    client ~50 ms of start-up. The admin and producer clients get the setting too; yours
    wins."""
    config = validate_connection("kafka_default", {"bootstrap.servers": "k:9092"})
    assert config["reconnect.backoff.ms"] == RECONNECT_BACKOFF_MS == 25
    assert client_config(config)["reconnect.backoff.ms"] == 25
    mine = validate_connection("kafka_default", {"bootstrap.servers": "k:9092",
                                                 "reconnect.backoff.ms": 500})
    assert mine["reconnect.backoff.ms"] == 500
