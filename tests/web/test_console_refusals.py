"""Refusals of the console (issue 41, section 3 items 6 and 7), on PostgreSQL and SQLite.

Every action request is checked in one order: the token (401, nobody to name, so not
audited), the role (403), then what it asks (400, 404) and the state of things (409);
from the role on, every refusal is one audit row, a preview's too. A time parameter out
of what a datetime holds, once in UTC, is a 400 naming the parameter, never the
database's error (a 503 that looks like an outage).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select
from starlette.testclient import TestClient

from sharedstream.statestore.models import audit_entry
from sharedstream.statestore.store import StateStore
from sharedstream.web.app import create_app
from sharedstream.web.settings import ConsoleSettings

pytestmark = pytest.mark.integration

READ = "r" * 20
ALICE = "a" * 20
DLQ = "orders.dlq"


def console(store: StateStore) -> TestClient:
    settings = ConsoleSettings(token=READ, operate_tokens={"alice": ALICE}, dlq_topics=(DLQ,),
                           connections={"kafka_default": {"bootstrap.servers": "127.0.0.1:9"}},
                           kafka_timeout=1.0)
    return TestClient(create_app(settings, store, sampler=False),
                      raise_server_exceptions=False)


def audit(store: StateStore) -> list[dict[str, Any]]:
    with store.engine.connect() as connection:
        return [dict(r) for r in connection.execute(
            select(audit_entry).order_by(audit_entry.c.id)).mappings()]


HELD = {"consumer_group": "g", "topic": "t", "partition": 0, "offset": 0}
# (action, body, status for the operate token, what the detail says, the audited target)
REFUSED: list[tuple[str, Any, int, str, str]] = [
    ("dlq-replay", {"topic": "orders"}, 404, "not a dead-letter topic", "orders"),
    ("dlq-replay", {"topic": "orders", "dry_run": True}, 404, "not a dead-letter topic",
     "orders (dry run)"),
    ("dlq-replay", {"topic": DLQ, "watchers": [""]}, 400, "watchers", f"{DLQ} --watcher "),
    ("offsets-reset", {"consumer_group": "g", "to": "soon"}, 400, "to: ", "g --to soon"),
    ("offsets-reset", {"consumer_group": "g", "to": "1000000d", "dry_run": True}, 400, "to: ",
     "g --to 1000000d (dry run)"),
    ("held-retry", {**HELD, "partition": -1}, 400, "partition must be an integer",
     "g t[-1]@0"),
    ("held-retry", {"consumer_group": "g"}, 400, "topic: ", "g ?[?]@?"),
    ("triggerer-forget", {"triggerer_id": ""}, 400, "triggerer_id: ", ""),
    ("triggerer-forget", b"{not json", 400, "request body: not valid JSON", "?"),
    ("triggerer-forget", {"triggerer_id": "nobody"}, 409, "no triggerer", "nobody"),
]


def post(client: TestClient, action: str, body: Any, token: str | None) -> Any:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(f"/api/v1/actions/{action}", content=content, headers=headers)


@pytest.mark.parametrize(("action", "body", "status", "detail", "target"), REFUSED,
                         ids=[f"{a}-{i}" for i, (a, *_) in enumerate(REFUSED)])
def test_every_refusal_after_the_token_is_audited_and_the_role_comes_first(
        store: StateStore, action: str, body: Any, status: int, detail: str,
        target: str) -> None:
    client = console(store)
    # No token: the guard answers first, and there is nobody to name in the audit.
    assert post(client, action, body, None).status_code == 401
    assert audit(store) == []
    # The read token: the role is checked before anything the request asks.
    read = post(client, action, body, READ)
    assert (read.status_code, list(read.json())) == (403, ["detail"]), read.text
    assert "needs the operate role" in read.json()["detail"]
    # The operate token: what it asks is refused, and that refusal is audited too.
    refused = post(client, action, body, ALICE)
    assert refused.status_code == status, refused.text
    assert list(refused.json()) == ["detail"] and detail in refused.json()["detail"]
    rows = [(r["actor"], r["action"], r["target"], r["ok"], r["result"]) for r in audit(store)]
    name = action.replace("-", " ").replace("triggerer ", "triggerers ")
    assert rows == [
        ("console:read", name, target, False, "refused: the read role cannot act"),
        ("console:alice", name, target, False, f"refused: {refused.json()['detail']}")]


OUT_OF_RANGE = ["9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+05:00", "0000-01-01",
                "10000-01-01T00:00:00", "1000000d", "99999999999999999999999d",
                "9" * 5000 + "d"]


@pytest.mark.parametrize(("path", "name"), [
    ("/api/v1/audit", "since"), ("/api/v1/events", "since"), ("/api/v1/events", "until"),
    ("/api/v1/dead-letters", "since")])
@pytest.mark.parametrize("value", OUT_OF_RANGE)
def test_a_time_out_of_range_is_a_400_naming_it(store: StateStore, path: str, name: str,
                                                 value: str) -> None:
    query = {name: value, **({"topic": DLQ} if "dead-letters" in path else {})}
    answer = console(store).get(path, params=query, headers={"Authorization": f"Bearer {READ}"})
    assert answer.status_code == 400, (answer.status_code, answer.text[:300])
    detail = answer.json()["detail"]
    assert detail.startswith(f"{name}: ") and "\n" not in detail, detail
    assert value[:20] not in detail or len(value) < 40


@pytest.mark.parametrize("value", ["9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z",
                                   "0001-01-01T00:30:00Z", "36500d"])
def test_the_extreme_times_in_range_are_answered(store: StateStore, value: str) -> None:
    store.register_asset("orders")
    client = console(store)
    auth = {"Authorization": f"Bearer {READ}"}
    for path, name in (("/api/v1/audit", "since"), ("/api/v1/events", "since"),
                       ("/api/v1/events", "until"), ("/events", "until"),
                       ("/assets/orders", "until"), ("/assets/orders", "since")):
        answer = client.get(path, params={name: value}, headers=auth)
        assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
