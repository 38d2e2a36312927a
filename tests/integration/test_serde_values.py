"""Issue 30 (on issue 27's decode once): typed values declared per watcher, on a real
``sharedstream run`` over the real broker and SQLite (watchers in ``serde_watchers.py``).

* Three watchers declaring the same ``JsonValue(model=Order)`` build one ``Order`` per
  message, not three: the model counts its constructions and the events carry the count.
* A value that does not fit the model is each declaring watcher's rejection, the reason
  naming the field path; a value that is not JSON is every watcher's rejection.
* A registry value that is not framed is rejected naming its first byte; a framed one
  while the registry does not answer is held (not rejected, not committed past) and the
  process is not ready.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from streams import create_schema
from test_text_safety import NO_DLQ, produce_values, rejected_rows, wait_committed
from triggerer import Triggerer, connection_for, run_cli, until, write_config

from sharedstream.statestore.models import asset_event

pytestmark = pytest.mark.integration
WATCHERS = Path(__file__).resolve().parent / "serde_watchers.py"


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
def serde_run(tmp_path: Path, kafka_bootstrap: str, create_topic: Any
              ) -> Iterator[tuple[Triggerer, str, str, str, str]]:
    """``sharedstream run serde_watchers.py`` on SQLite, the registry url a closed port."""
    db_url = f"sqlite:///{tmp_path / 'serde.db'}"
    create_schema(db_url)
    topic, avro_topic = create_topic("serde"), create_topic("serde-avro")
    connection = connection_for(kafka_bootstrap, "serde")
    config = write_config(tmp_path / "sharedstream.toml", database_url=db_url,
                          connection=connection, connection_id="serde")
    process = Triggerer(WATCHERS, config, tmp_path, env={
        "SERDE_TOPIC": topic, "SERDE_AVRO_TOPIC": avro_topic,
        "SHAREDSTREAM_SCHEMA_REGISTRY_SERDE_REGISTRY__URL": f"http://127.0.0.1:{closed_port()}",
    })
    try:
        yield process, db_url, topic, avro_topic, str(connection["group.id"])
    finally:
        process.kill()


def events(db_url: str) -> list[tuple[str, int, str]]:
    engine = sa.create_engine(db_url)
    e = asset_event.c
    try:
        with engine.connect() as connection:
            rows = connection.execute(sa.select(e.watcher, e.offset, e.payload)
                                      .order_by(e.watcher, e.offset)).all()
    finally:
        engine.dispose()
    return [(row.watcher, row.offset, row.payload) for row in rows]


def test_watchers_declaring_one_model_share_one_decode_and_reject_with_the_field_path(
        serde_run: tuple[Triggerer, str, str, str, str], kafka_bootstrap: str) -> None:
    process, db_url, topic, _, prefix = serde_run
    produce_values(kafka_bootstrap, topic, [
        b'{"id": 1, "status": "paid", "amount": 2.5}',
        b'{"id": 2, "status": "paid", "amount": "lots"}',
        b"\xff\xfe not json",
        b'{"id": 3, "status": "open", "amount": 1}',
        b'{"id": 4, "status": "paid", "amount": 4}',
    ])
    process.start()
    group = f"{prefix}.{topic}"
    wait_committed(kafka_bootstrap, group, topic, 5)

    found = events(db_url)
    paid = [(w, o, json.loads(p)) for w, o, p in found if w.startswith("paid_")]
    assert [(w, o, p["id"]) for w, o, p in paid] == [
        (w, o, o // 4 * 3 + 1) for w in ("paid_a", "paid_b", "paid_c") for o in (0, 4)]
    # Order fits offsets 0, 3 and 4: built 3 times if the watchers share the decode, 9
    # if each decodes (then the last watcher to reach offset 4 would count 9).
    assert max(p["decodes"] for _, _, p in paid) == 3
    assert [(w, o, json.loads(p)) for w, o, p in found if w == "audit"] == [
        ("audit", o, {"id": i, "decodes": n}) for o, i, n in ((0, 1, 1), (1, 2, 2), (3, 3, 3),
                                                             (4, 4, 4))]
    rows = rejected_rows(db_url)
    assert {(o, w, r) for o, (w, r, _) in rows.items()} >= {
        (1, rows[1][0], "Order: Expected `float`, got `str` - at `$.amount`" + NO_DLQ)}
    assert sorted(rows) == [1, 2]


def test_a_registry_value_not_framed_is_rejected_and_a_framed_one_waits_for_the_registry(
        serde_run: tuple[Triggerer, str, str, str, str], kafka_bootstrap: str) -> None:
    process, db_url, _, avro_topic, prefix = serde_run
    produce_values(kafka_bootstrap, avro_topic, [
        b'{"id": 1}',
        b"\x00\x00\x00\x00\x01\x02\x06abc",
    ])
    process.start()
    group = f"{prefix}.{avro_topic}"
    wait_committed(kafka_bootstrap, group, avro_topic, 1)
    process.wait_log(r"schema registry 'serde_registry': \w+ looking up schema id 1")
    until(lambda: "serde" in process.get("/readyz")[1] and process.get("/readyz")[0] == 503,
          "not ready while the registry does not answer", timeout=30)

    assert rejected_rows(db_url) == {0: (
        "avro", "not schema-registry framed: first byte 0x7b, expected 0x00 (magic byte)"
        + NO_DLQ, '{"id": 1}')}
    assert [e for e in events(db_url) if e[0] == "avro"] == []


def test_a_watcher_naming_a_registry_that_is_not_configured_does_not_start(
        tmp_path: Path, kafka_bootstrap: str, create_topic: Any) -> None:
    """Before: ``run`` started and held every framed message for ever (readiness false),
    for a typo in ``registry=`` that only the configuration can fix."""
    db_url = f"sqlite:///{tmp_path / 'serde.db'}"
    config = write_config(tmp_path / "sharedstream.toml", database_url=db_url,
                          connection=connection_for(kafka_bootstrap, "serde"),
                          connection_id="serde")
    env = {"SERDE_TOPIC": create_topic("serde"), "SERDE_AVRO_TOPIC": create_topic("serde-avro")}
    env = {k: v for k, v in {**os.environ, **env}.items()
           if not k.startswith("SHAREDSTREAM_SCHEMA_REGISTRY_")}
    done = run_cli(["check", str(WATCHERS), "--config", str(config)], env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: watcher 'avro': schema registry 'serde_registry' is not configured: add "
        "[schema_registries.serde_registry] with a url to the config file or set "
        "SHAREDSTREAM_SCHEMA_REGISTRY_SERDE_REGISTRY__URL")
    assert "Traceback" not in done.stderr
