"""Migration 0008 (issue 43): event payloads become ``jsonb`` on PostgreSQL.

On SQLite, PostgreSQL and MariaDB: payloads written as JSON text at 0007 read back as the
same values after the upgrade and after the downgrade; on PostgreSQL they are documents
(``jsonb_typeof``), and a ``\\u0000`` escape, which ``jsonb`` cannot hold, became
U+FFFD while a literal backslash before ``u0000`` stayed what it was.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from sharedstream.statestore import StateStore
from sharedstream.statestore.models import asset_event

PAYLOADS: list[Any] = [
    {"id": 1, "status": "paid", "lines": [{"sku": "a", "qty": 2}]},
    ["a", 1, None, True],
    "just a string",
    3.5,
    {"text": "nul\u0000inside", "twice": "\u0000\u0000"},
    {"text": "a backslash then u0000: \\u0000"},
    {"é": "✓ 😀"},
]
# What jsonb keeps of each: the NUL characters become U+FFFD, nothing else changes.
AFTER = [json.loads(json.dumps(p).replace("\\u0000", "\\ufffd")) if i == 4 else p
         for i, p in enumerate(PAYLOADS)]


# asset_event as 0007 knows it: the payload is text, whatever the models say now.
AS_0007 = sa.table("asset_event", *(sa.column(c.name, sa.Text if c.name == "payload" else c.type)
                                    for c in asset_event.columns))


def _rows(asset_id: int) -> list[dict[str, Any]]:
    return [{"id": n + 1, "asset_id": asset_id, "watcher": "w", "payload": json.dumps(p),
             "topic": "t", "topic_id": "tid", "partition": 0, "offset": n, "event_index": 0,
             "created_at": datetime(2030, 1, 1, tzinfo=UTC)} for n, p in enumerate(PAYLOADS)]


def _payloads(store: StateStore) -> list[Any]:
    with store.engine.connect() as connection:
        return [json.loads(text) for text in connection.execute(
            sa.select(asset_event.c.payload).order_by(asset_event.c.id)).scalars()]


def test_0008_converts_payloads_and_back(db_url: str) -> None:
    store = StateStore.from_url(db_url)
    try:
        store.upgrade("0007")
        asset_id = store.register_asset("orders")
        with store.engine.begin() as connection:  # as 0007 wrote them: JSON text
            connection.execute(AS_0007.insert(), _rows(asset_id))
        store.upgrade()
        postgres = store.engine.dialect.name == "postgresql"
        assert _payloads(store) == (AFTER if postgres else PAYLOADS)
        if postgres:
            with store.engine.connect() as connection:
                kinds = connection.execute(sa.text(
                    "SELECT jsonb_typeof(payload) FROM asset_event ORDER BY id")).scalars()
                assert list(kinds) == ["object", "array", "string", "number", "object",
                                       "object", "object"]
        store.downgrade("0007")
        assert _payloads(store) == (AFTER if postgres else PAYLOADS)
    finally:
        store.downgrade()
        store.close()
