"""Fixtures of the console tests (``sharedstream web``).

* ``seeded``: a PostgreSQL schema (the session's real server) holding one of every
  thing the console shows, written through the product's own functions: assets
  (one named with markup), events, asset and task state, a recorded group, a live
  triggerer row whose ``/status`` is a small canned server (a held message whose
  reason is markup) and a stale one, recorded rejections, a destination's cursor and
  an undelivered event; plus a real dead-letter topic with a sharedstream record and a
  foreign one.
* ``console_app``: the ASGI app over it (no background sampler), no token, loopback.

The browser tests (``test_console_browser.py``) build their own stack: two real
``sharedstream run`` processes, a broker, the console as a subprocess and Chromium.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from sqlalchemy import insert, update

from kafka_writes import ordered_producer

TESTS = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("SHAREDSTREAM_CHROMIUM", "/usr/bin/chromium")
SCALE_WATCHERS = 10_000
for helper_dir in (TESTS / "e2e", TESTS / "integration"):
    if str(helper_dir) not in sys.path:
        sys.path.insert(0, str(helper_dir))

from console_seed import GROUP, MARKUP, Seeded, StatusServer, status_document  # noqa: E402
from db_schemas import postgres_schema_url  # noqa: E402

from sharedstream.core.message import Coordinates  # noqa: E402
from sharedstream.delivery import cursor, undelivered  # noqa: E402
from sharedstream.kafka.dlq_headers import build_dlq_headers  # noqa: E402
from sharedstream.statestore.events import insert_events  # noqa: E402
from sharedstream.statestore.models import rejected_message, triggerer_process  # noqa: E402
from sharedstream.statestore.scopes import AssetScope, TaskScope, Writer  # noqa: E402
from sharedstream.statestore.store import StateStore  # noqa: E402
from sharedstream.statestore.types import utcnow  # noqa: E402
from sharedstream.triggerer.heartbeat import Heartbeat  # noqa: E402
from sharedstream.triggerer.registration import GroupDeclaration, register_groups  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    # Starlette's TestClient (schemathesis uses it too) nags about httpx: nothing to act on.
    config.addinivalue_line("filterwarnings",
                            "ignore:Using `httpx` with `starlette.testclient`")


def _dlq_records(bootstrap: str, topic: str) -> None:
    producer = ordered_producer(bootstrap)
    origin = Coordinates("orders", "tid-1", 1, 7, int(time.time() * 1000))
    headers = build_dlq_headers(original_headers=[("trace", b"abc")], origin=origin,
                                consumer_group=GROUP,
                                rejections={"paid": "missing amount", "audit": MARKUP},
                                replay_count=0)
    for _ in range(2):  # two copies of one rejection: shown once, copies 2
        producer.produce(topic, value=f'{{"id": 7, "note": "{MARKUP}"}}'.encode(), key=b"7",
                         headers=headers)
    producer.produce(topic, value=b"\xff\xfe not utf-8", key=None)  # foreign
    assert producer.flush(30) == 0


def seed(store: StateStore, status_url: str) -> tuple[str, str, list[int]]:
    now = utcnow()
    orders = store.register_asset("orders", "kafka://broker/orders")
    marked = store.register_asset("<b>bold</b>&co", None)
    store.register_asset("old")
    store.deactivate_asset("old")
    rows = []
    for n in range(30):
        rows.append({"asset_id": orders if n % 3 else marked,
                     "watcher": "paid" if n % 2 else "audit",
                     "payload": json.dumps({"id": n, "html": MARKUP}), "topic": "orders",
                     "topic_id": "tid-1", "partition": n % 2, "offset": n, "event_index": 0,
                     "created_at": now - timedelta(minutes=30 - n)})
    with store.engine.begin() as connection:
        insert_events(connection, rows)
    event_ids = [r["id"] for r in rows]
    store.asset(AssetScope(name="orders"), writer=Writer.api("test")).set("watermark", 29)
    store.asset(AssetScope(name="orders"), writer=Writer.api("test")).set("note", MARKUP)
    store.task(TaskScope("daily", "manual__2024-05-01T00:00:00+00:00", "load")).set(
        "progress", {"rows": 12, "html": MARKUP})
    store.task(TaskScope("daily", "scheduled/2", "load", 3)).set("k", [1, 2])
    register_groups(store, [GroupDeclaration(("kafka", ("orders",), "kafka_default"), GROUP,
                                             frozenset({"audit", "paid"}))], takeover=True)
    live = Heartbeat(store, version="0.1.0", watchers=["dags/orders.py"], groups=[GROUP],
                     status_url=status_url)
    live.register()
    stale = Heartbeat(store, version="0.1.0", watchers=["dags/orders.py"], groups=[GROUP],
                      status_url="http://127.0.0.1:9/status")
    stale.register()
    with store.engine.begin() as connection:
        connection.execute(update(triggerer_process)
                           .where(triggerer_process.c.id == stale.id)
                           .values(last_seen=now - timedelta(minutes=5)))
        connection.execute(insert(rejected_message), [
            {"watcher": "paid", "topic": "orders", "topic_id": "tid-1", "partition": 0,
             "offset": 100 + n, "reason": "missing amount" if n < 3 else MARKUP,
             "value_preview": MARKUP, "created_at": now} for n in range(5)])
    lease = timedelta(seconds=30)
    cursor.claim(store.engine, "hooks", start_at_end=False, now=now, lease=lease)
    cursor.advance(store.engine, "hooks", event_ids[4], 5, now=now, lease=lease)
    undelivered.record(store.engine, "hooks", [(event_ids[2], f"HTTP 400: {MARKUP}")], now)
    return live.id, stale.id, event_ids


def keep_alive(store: StateStore, process_id: str, stop: threading.Event) -> None:
    """Move a seeded triggerer's ``last_seen`` every 5 s, as a running process does, so it
    stays live however long the module's tests take."""
    while not stop.wait(5.0):
        with store.engine.begin() as connection:
            connection.execute(update(triggerer_process)
                               .where(triggerer_process.c.id == process_id)
                               .values(last_seen=utcnow()))


def forget_group(admin: AdminClient, group: str) -> None:
    """The seeded group never committed on the broker: the pages say so. Another test of
    the session may have used the same group name on the shared broker (a topic named
    ``orders`` exists once any test made one), so its offsets are deleted first."""
    try:
        admin.delete_consumer_groups([group], request_timeout=10)[group].result(timeout=30)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.GROUP_ID_NOT_FOUND:
            raise


@pytest.fixture(scope="module")
def seeded(database_url: str, kafka_bootstrap: str, kafka_admin: AdminClient
           ) -> Iterator[Seeded]:
    status = StatusServer({})
    admin = kafka_admin
    forget_group(admin, GROUP)
    dlq = f"web-dlq-{int(time.time() * 1000)}"
    admin.create_topics([NewTopic(dlq, num_partitions=1, replication_factor=1)]
                        )[dlq].result(30)
    for url in postgres_schema_url(database_url):
        store = StateStore.from_url(url)
        store.upgrade()
        live_id, stale_id, event_ids = seed(store, status.url)
        status.stop()
        status = StatusServer(status_document(live_id))
        with store.engine.begin() as connection:
            connection.execute(update(triggerer_process)
                               .where(triggerer_process.c.id == live_id)
                               .values(status_url=status.url))
        _dlq_records(kafka_bootstrap, dlq)
        stop = threading.Event()

        beating = threading.Thread(target=keep_alive, args=(store, live_id, stop), daemon=True)
        beating.start()
        try:
            yield Seeded(url, store, live_id, stale_id, dlq, kafka_bootstrap, event_ids)
        finally:
            stop.set()
            beating.join()
            store.close()
            status.stop()
            admin.delete_topics([dlq], operation_timeout=10)


@pytest.fixture(scope="module")
def console_app(seeded: Seeded) -> Iterator[Any]:
    """The console's ASGI app over ``seeded`` (no token: loopback, ``testserver`` trusted)."""
    from sharedstream.web.app import create_app
    from sharedstream.web.settings import ConsoleSettings

    settings = ConsoleSettings(
        connections={"kafka_default": {"bootstrap.servers": seeded.bootstrap}},
        dlq_topics=(seeded.dlq_topic,), destinations={"hooks": "webhook"},
        trusted_hosts=("testserver",), kafka_timeout=10.0)
    app = create_app(settings, seeded.store, sampler=False)
    yield app
    app.state.sources.close()  # what the app's lifespan does at shutdown


@pytest.fixture(params=["postgresql", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    """An empty store of this version's schema on the session's PostgreSQL or on SQLite."""
    if request.param == "sqlite":
        found = StateStore.from_url(f"sqlite:///{tmp_path / 'console.db'}")
        found.upgrade()
        yield found
        found.close()
        return
    yield request.getfixturevalue("postgres_store")


@pytest.fixture
def postgres_store(database_url: str) -> Iterator[StateStore]:
    for url in postgres_schema_url(database_url):
        found = StateStore.from_url(url)
        found.upgrade()
        yield found
        found.close()


@dataclass
class Scale:
    """``scale``: 10,010 watchers (10,000 in ``BIG``, ten of them also in ``SMALL``),
    10,000 assets and 1,000 held messages, as bench/console_pages.py seeds them."""

    url: str
    store: StateStore
    heartbeat: Heartbeat


@pytest.fixture(scope="module")
def scale(database_url: str) -> Iterator[Scale]:
    from bench.console_pages import seed, status_document

    status = StatusServer(status_document(SCALE_WATCHERS))
    for url in postgres_schema_url(database_url):
        store = StateStore.from_url(url)
        store.upgrade()
        try:
            yield Scale(url, store, seed(store, status.url, SCALE_WATCHERS))
        finally:
            store.close()
            status.stop()


@pytest.fixture(scope="module")
def scale_app(scale: Scale) -> Iterator[Any]:
    """The console's ASGI app over ``scale`` (no token: loopback, ``testserver`` trusted)."""
    from sharedstream.web.app import create_app
    from sharedstream.web.settings import ConsoleSettings

    app = create_app(ConsoleSettings(trusted_hosts=("testserver",)), scale.store, sampler=False)
    yield app
    app.state.sources.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium (Debian's) under Playwright, for the module."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), (
        f"{CHROMIUM} is missing: apt-get install -y chromium (or set SHAREDSTREAM_CHROMIUM)")
    playwright = sync_playwright().start()
    try:
        found = playwright.chromium.launch(executable_path=CHROMIUM)
        yield found
        found.close()
    finally:
        playwright.stop()
