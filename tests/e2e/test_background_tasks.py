"""``sharedstream run``'s background tasks never stop silently (real broker and PostgreSQL).

Beside its watchers the process runs a deliverer per destination and a heartbeat. Each
is broken on purpose here, the way a user can break it, and each break must show:

* a webhook URL that passes the settings check but that the HTTP client refuses
  (``http://[::1/x``: an ``InvalidURL``, none of the errors a sender classifies).
  The destination is restarted after its backoff and shows as failing in ``/readyz``,
  with an ``ERROR`` line and ``sharedstream_delivery_failures_total{reason="unexpected"}``;
  ingestion goes on. (Before: the delivery task died, readiness stayed 200.)
* the heartbeat's table damaged under it (``held_retry`` renamed: every beat raises a
  ``ProgrammingError``, no outage that passes by itself). An ``ERROR`` line names it and
  ``sharedstream_heartbeat_failures_total`` counts it; the beat goes on. (Before: a debug
  line only, so the process silently vanished from ``sharedstream web``.)
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from db_schemas import postgres_schema_url
from streams import produce
from triggerer import Triggerer, until, write_config

ENV = {"SHAREDSTREAM__DESTINATIONS__HOOKS__SECRET": "s3cret"}


@pytest.fixture
def postgres_url(database_url: str) -> Iterator[str]:
    yield from postgres_schema_url(database_url)


def start(tmp_path: Path, postgres_url: str, connection: dict[str, Any], topic: str,
          triggerers: Callable[..., Triggerer], **tables: dict[str, Any]) -> Triggerer:
    config = write_config(tmp_path / "sharedstream.toml", database_url=postgres_url,
                          connection=connection, tables=tables)
    secret = ENV if "destinations.hooks" in tables else {}
    return triggerers(config, env={"E2E_TOPIC": topic, "E2E_WATCHERS": "everything",
                                   **secret}).start()


def test_a_destination_whose_sender_raises_is_restarted_and_shown_failing(
        tmp_path: Path, postgres_url: str, kafka_bootstrap: str, connection: dict[str, Any],
        create_topic: Callable[..., str], triggerers: Callable[..., Triggerer]) -> None:
    topic = create_topic("orders")
    hooks = {"kind": "webhook", "url": "http://[::1/x", "start": "earliest",
             "retry_initial": 0.05, "retry_max": 0.2}
    process = start(tmp_path, postgres_url, connection, topic, triggerers,
                    **{"destinations.hooks": hooks})
    process.wait_log(r"health and metrics on")
    produce(kafka_bootstrap, topic, range(3), 1)

    def not_ready() -> str | None:
        status, body = process.get("/readyz")
        return body if status == 503 and "destination hooks" in body else None

    reason = until(not_ready, "/readyz naming the destination whose sender raises")
    assert "destination hooks: failing" in reason and "InvalidURL" in reason, reason
    process.wait_log(r"ERROR sharedstream\.delivery\S*: destination hooks: unexpected error")
    # Restarted, not given up: it fails again after each backoff.
    until(lambda: re.search(r'sharedstream_delivery_failures_total\{destination="hooks",'
                            r'reason="unexpected"\} ([2-9]|\d\d+)\.0',
                            process.get("/metrics")[1]), "the destination retried")
    assert re.search(r"sharedstream_events_persisted_total [1-9]", process.get("/metrics")[1])
    process.signal(signal.SIGTERM)
    assert process.wait() == 0


def test_a_heartbeat_that_cannot_be_written_is_logged_and_counted(
        tmp_path: Path, postgres_url: str, connection: dict[str, Any],
        create_topic: Callable[..., str], triggerers: Callable[..., Triggerer]) -> None:
    process = start(tmp_path, postgres_url, connection, create_topic("orders"), triggerers)
    process.wait_ready()
    engine = sa.create_engine(postgres_url)
    try:
        with engine.begin() as db:
            db.execute(sa.text("ALTER TABLE held_retry RENAME TO held_retry_damaged"))
    finally:
        engine.dispose()
    line = process.wait_log(r"ERROR sharedstream\.triggerer\.process: heartbeat not "
                            r"written: (.*)")
    assert "ProgrammingError" in line.group(1) and "held_retry" in line.group(1), line[0]
    assert re.search(r"^sharedstream_heartbeat_failures_total [1-9]",
                     process.get("/metrics")[1], re.M)
    process.signal(signal.SIGTERM)
    assert process.wait() == 0
