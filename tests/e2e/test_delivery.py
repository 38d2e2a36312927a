"""Events reach their destinations: a real webhook server and a real Kafka topic.

The triggerer (``sharedstream run``, a real process) persists the ``everything``
watcher's events and delivers them beside ingestion. The tests break the
destination on purpose (a 503 storm, a 400, a kill -9 while a request is in flight)
and count what the destination acknowledged, per event identity.
"""

from __future__ import annotations

import json
import signal
import sqlite3
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer
from streams import produce
from triggerer import Triggerer, run_cli, until, write_config

from sharedstream.delivery.webhook import signature
from webhook_server import WebhookServer

SECRET = "s3cret"  # comes in through the environment, one variable for one key
ENV = {"SHAREDSTREAM__DESTINATIONS__HOOKS__SECRET": SECRET}


def webhook_config(tmp_path: Path, database_url: str, connection: dict[str, Any],
                   url: str, **options: Any) -> Path:
    hooks = {"kind": "webhook", "url": url, "start": "earliest", "retry_initial": 0.05,
             "retry_max": 0.2, **options}
    return write_config(tmp_path / "sharedstream.toml", database_url=database_url,
                        connection=connection, tables={"destinations.hooks": hooks})


def acked_ids(server: WebhookServer) -> Counter[int]:
    """Acknowledged requests per message id (the watcher's event payload)."""
    return Counter(r.document["payload"]["id"] for r in server.acked())


def test_webhook_signed_retried_through_a_503_storm_and_a_400_recorded_undeliverable(
        tmp_path: Path, sqlite_url: str, kafka_bootstrap: str, connection: dict[str, Any],
        create_topic: Callable[..., str], triggerers: Callable[..., Triggerer]) -> None:
    storm, refused, count = 20, 13, 100

    def answer(document: dict[str, Any], n: int) -> int:
        if n <= storm:
            return 503
        return 400 if document["payload"]["id"] == refused else 200

    topic = create_topic("orders", partitions=3)
    with WebhookServer(answer) as server:
        config = webhook_config(tmp_path, sqlite_url, connection, server.url)
        process = triggerers(config, env={"E2E_TOPIC": topic, "E2E_WATCHERS": "everything",
                                          **ENV}).start()
        produce(kafka_bootstrap, topic, range(count), 3)
        until(lambda: len(acked_ids(server)) == count - 1, "every event but one delivered")
        # Every request is signed with the secret from the environment.
        assert all(r.headers["X-Sharedstream-Signature"] == signature(SECRET, r.body)
                   for r in server.received)
        assert all(r.headers["Idempotency-Key"] == r.document["identity"]
                   for r in server.received)
        # The storm was retried, never skipped: each event acknowledged exactly once.
        assert [r.status for r in server.received[:storm]] == [503] * storm
        assert set(acked_ids(server).values()) == {1}
        assert refused not in acked_ids(server)
        # The counters move once the deliverer has the answers (the server records each
        # request before its sender hears back): wait for them, then check them exactly.
        delivered = f'sharedstream_events_delivered_total{{destination="hooks"}} {count - 1.0}'
        until(lambda: delivered in process.get("/metrics")[1]
              and 'sharedstream_events_undeliverable_total{destination="hooks"} 1.0'
              in process.get("/metrics")[1], "the deliveries and the refusal counted")
        metrics = process.get("/metrics")[1]
        assert f'sharedstream_delivery_failures_total{{destination="hooks",reason="http_503"}}' \
               f' {float(storm)}' in metrics
        process.signal(signal.SIGTERM)
        assert process.wait() == 0
        listed = run_cli(["events", "undelivered", "--config", str(config), "--json"],
                         cwd=tmp_path, env=ENV)
        [row] = json.loads(listed.stdout)
        assert row["event"]["payload"] == {"id": refused} and "400" in row["reason"]
        # Fixed on the receiving side: --retry sends it again and it leaves the list.
        server.answer = lambda _doc, _n: 200
        retried = run_cli(["events", "undelivered", "--config", str(config), "--retry"],
                          cwd=tmp_path, env=ENV)
        assert retried.returncode == 0, retried.stderr
        assert acked_ids(server)[refused] == 1
        again = run_cli(["events", "undelivered", "--config", str(config), "--json"],
                        cwd=tmp_path, env=ENV)
        assert json.loads(again.stdout) == []


def test_webhook_after_kill_9_repeats_exactly_what_the_stored_cursor_did_not_cover(
        tmp_path: Path, sqlite_url: str, kafka_bootstrap: str, connection: dict[str, Any],
        create_topic: Callable[..., str], triggerers: Callable[..., Triggerer]) -> None:
    count, held = 100, 30
    topic = create_topic("orders")
    produce(kafka_bootstrap, topic, range(count), 1)
    with WebhookServer() as server:
        server.hold = lambda document: document["payload"]["id"] == held
        # A short lease: the restarted process takes over from the killed one sooner.
        config = webhook_config(tmp_path, sqlite_url, connection, server.url,
                                lease_seconds=2.0)
        env = {"E2E_TOPIC": topic, "E2E_WATCHERS": "everything", **ENV}
        first = triggerers(config, env=env).start()
        until(server.holding.is_set, "the request for the held event in flight")
        first.kill()  # kill -9 while a request is in flight
        server.hold = lambda _document: False
        server.release()  # the receiver acts on the held request: its sender never hears
        until(lambda: held in acked_ids(server), "the held request answered")
        before = acked_ids(server)
        ids = event_ids_by_payload(sqlite_url)
        cursor = stored_cursor(sqlite_url)
        uncovered = {n for n in before if ids[n] > cursor}
        assert held in uncovered  # the fault landed: a delivery the cursor does not cover
        triggerers(config, env=env).start()
        until(lambda: len(acked_ids(server)) == count, "every event delivered after restart")
    repeats = {n for n, times in acked_ids(server).items() if times > 1}
    assert repeats == uncovered  # what the cursor covered is never sent again
    assert max(acked_ids(server).values()) == 2  # at most one repeat each
    keys = Counter(r.headers["Idempotency-Key"] for r in server.acked())
    assert {k for k, n in keys.items() if n > 1} == {
        r.document["identity"] for r in server.acked() if r.document["payload"]["id"] in repeats}


def event_ids_by_payload(sqlite_url: str) -> dict[int, int]:
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as db:
        return {json.loads(payload)["id"]: event_id
                for event_id, payload in db.execute("SELECT id, payload FROM asset_event")}


def stored_cursor(sqlite_url: str) -> int:
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as db:
        [(last_id,)] = db.execute(
            "SELECT last_id FROM delivery_cursor WHERE destination = 'hooks'").fetchall()
    return int(last_id)


def test_kafka_destination_has_every_event_after_kill_9(
        tmp_path: Path, sqlite_url: str, kafka_bootstrap: str, connection: dict[str, Any],
        create_topic: Callable[..., str], triggerers: Callable[..., Triggerer]) -> None:
    count = 600
    topic, out = create_topic("orders", partitions=3), create_topic("events")
    # One event per round: the kill lands among many small, separately committed rounds.
    config = write_config(tmp_path / "sharedstream.toml", database_url=sqlite_url,
                          connection=connection, tables={"destinations.events": {
                              "kind": "kafka", "topic": out, "connection": "e2e",
                              "start": "earliest", "batch_size": 1, "lease_seconds": 2.0}})
    env = {"E2E_TOPIC": topic, "E2E_WATCHERS": "everything"}
    produce(kafka_bootstrap, topic, range(count), 3)
    first = triggerers(config, env=env).start()
    seen: Counter[str] = Counter()
    reader = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"read-{out}",
                       "auto.offset.reset": "earliest", "enable.auto.commit": False})
    reader.subscribe([out])

    def read() -> int:
        for record in reader.consume(500, timeout=0.2):
            if record.error() is None:
                identity = dict(record.headers() or [])["sharedstream.event.identity"]
                seen[identity.decode()] += 1
        return len(seen)

    until(lambda: read() >= 50, "some events on the destination topic", interval=0)
    first.kill()
    at_kill = len(seen)
    assert at_kill < count  # the kill landed mid-delivery
    triggerers(config, env=env).start()
    until(lambda: read() == count, "every event on the topic after the restart", interval=0)
    reader.close()
    assert set(seen.values()) <= {1, 2}
