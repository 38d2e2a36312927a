"""The console's REST API against a real PostgreSQL and a real broker.

Schemathesis generates requests for every operation of ``/api/v1/openapi.json`` (valid
and invalid parameters) and checks each answer against the schema: no server error,
documented status codes and content types, bodies that match their models. The tests
after it check what the answers say about the seeded data, and that the pages show
every value from a message, a reason or a state as text.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
import schemathesis
from console_seed import GROUP, MARKUP, Seeded
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import positive_data_acceptance
from starlette.testclient import TestClient

pytestmark = pytest.mark.integration

EXAMPLES = 15

def operations() -> list[tuple[str, GenerationMode]]:
    """Every operation of the API with valid input, and those that take query parameters
    with invalid input too (a path's only constraint is its length: costly to break,
    worth little); read from the app's schema at collection (no services: the
    document does not depend on the data)."""
    from sharedstream.statestore.store import StateStore
    from sharedstream.web.app import create_app
    from sharedstream.web.settings import ConsoleSettings

    store = StateStore.from_url("sqlite://")
    try:
        app = create_app(ConsoleSettings(), store, sampler=False)
        document = app.openapi()
    finally:
        store.close()
    found = []
    for path, methods in document["paths"].items():
        for method, spec in methods.items():
            label = f"{method.upper()} {path}"
            found.append((label, GenerationMode.POSITIVE))
            if any(p["in"] == "query" for p in spec.get("parameters", [])):
                found.append((label, GenerationMode.NEGATIVE))
    return found


@pytest.fixture(scope="module")
def api_schema(console_app: Any) -> Any:
    return schemathesis.openapi.from_asgi("/api/v1/openapi.json", console_app)


@pytest.fixture(scope="module")
def client(console_app: Any) -> TestClient:
    return TestClient(console_app)


@pytest.mark.parametrize(("label", "mode"), operations(),
                         ids=[f"{label}-{mode.value}" for label, mode in operations()])
def test_every_operation_answers_as_its_schema_says(api_schema: Any, label: str,
                                                    mode: GenerationMode) -> None:
    """Generated requests, valid (positive) and invalid (negative), for each operation:
    every answer is documented and matches its schema; invalid input is a 4xx."""
    operation = api_schema.find_operation_by_label(label)
    # `since`/`until` are strings (ISO-8601 or a duration): one that is neither is a
    # documented 400, so not every schema-valid string is accepted there.
    # So is an offsets reset's `to` (earliest, latest or a time), in its body.
    timed = any(p.name in ("since", "until") for p in operation.query) or label.endswith(
        "/actions/offsets-reset")
    excluded = [positive_data_acceptance] if timed else []

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case: Any) -> None:
        case.call_and_validate(headers={"Host": "testserver"}, excluded_checks=excluded)

    check()


def test_triggerers_alive_and_stale(client: TestClient, seeded: Seeded) -> None:
    found = {t["id"]: t for t in client.get("/api/v1/triggerers").json()["items"]}
    assert found[seeded.live_id]["alive"] and found[seeded.live_id]["health"] == "not_ready"
    assert found[seeded.live_id]["not_ready"] == [
        "group sharedstream.orders: a watcher is not subscribed"]
    assert not found[seeded.stale_id]["alive"] and found[seeded.stale_id]["health"] == "stale"
    stale = client.get("/api/v1/triggerers", params={"state": "stale"}).json()
    assert [t["id"] for t in stale["items"]] == [seeded.stale_id]
    detail = client.get(f"/api/v1/triggerers/{seeded.live_id}").json()
    assert detail["status"]["groups"][0]["consumer_group"] == GROUP


def test_group_partitions_lag_and_held(client: TestClient) -> None:
    group = client.get(f"/api/v1/groups/{GROUP}").json()
    assert group["watchers"] == ["audit", "paid"] and group["connection"] == "kafka_default"
    assert group["health"] == "held" and group["lag"] == 15 + 14
    assert [(p["partition"], p["lag"], p["lag_source"]) for p in group["partitions"]] == [
        (0, 15, "triggerer"), (1, 14, "triggerer")]
    # The broker knows no such group (it never committed): said in one line, the rest
    # still answers.
    assert group["kafka"]["error"] and "\n" not in group["kafka"]["error"]
    held = client.get("/api/v1/held", params={"watcher": "paid"}).json()["items"]
    assert [(h["offset"], h["reasons"]["paid"]) for h in held] == [(10, f"ValueError: {MARKUP}")]
    assert client.get("/api/v1/held", params={"watcher": "audit"}).json()["total"] == 0
    watchers = {w["name"]: w for w in client.get("/api/v1/watchers").json()["items"]}
    # Rejected: 5 rows, and the dead letter whose two copies are on the seeded topic.
    assert watchers["paid"]["held"] == 1 and watchers["paid"]["rejected"] == 5 + 1
    assert watchers["audit"]["rejected"] == 1 and watchers["audit"]["rejected_error"] is None
    assert watchers["paid"]["match"] == {"value": {"status": ["paid"]}}
    assert watchers["audit"]["match"] is None  # no match: every message
    assert client.get("/api/v1/groups/nope.none").status_code == 404


def test_events_filters_and_pages(client: TestClient, seeded: Seeded) -> None:
    first = client.get("/api/v1/events", params={"asset": "orders", "limit": 5}).json()
    assert len(first["items"]) == 5 and first["next_before"] == first["items"][-1]["id"]
    ids = [e["id"] for e in first["items"]]
    assert ids == sorted(ids, reverse=True)
    second = client.get("/api/v1/events", params={"asset": "orders", "limit": 5,
                                                  "before": first["next_before"]}).json()
    assert max(e["id"] for e in second["items"]) < min(ids)
    at = client.get("/api/v1/events", params={"topic": "orders", "partition": 1,
                                              "message_offset": 7}).json()["items"]
    assert [(e["watcher"], e["offset"], e["payload"]["id"]) for e in at] == [("paid", 7, 7)]
    recent = client.get("/api/v1/events", params={"since": "10m", "limit": 500}).json()
    assert 5 <= len(recent["items"]) <= 12
    assert client.get("/api/v1/events", params={"since": "yesterday-ish"}).status_code == 400
    one = client.get(f"/api/v1/events/{seeded.event_ids[3]}").json()
    assert one["payload"] == {"id": 3, "html": MARKUP}


def test_events_say_how_many_match_on_every_page(client: TestClient) -> None:
    """The count of matching events, not the page size (issue 43): 20 of the seeded 30
    events are of asset orders, 10 of them by watcher paid."""
    first = client.get("/api/v1/events", params={"asset": "orders", "limit": 5}).json()
    second = client.get("/api/v1/events", params={"asset": "orders", "limit": 5,
                                                  "before": first["next_before"]}).json()
    assert [(p["total"], p["total_exact"]) for p in (first, second)] == [(20, True)] * 2
    paid = client.get("/api/v1/events", params={"asset": "orders", "watcher": "paid"}).json()
    assert paid["total"] == len(paid["items"]) == 10
    assert "20 matching events, 20 shown, newest first" in client.get("/assets/orders").text
    assert "30 matching events, 30 shown, newest first" in client.get("/events").text


def test_assets_and_state(client: TestClient) -> None:
    page = client.get("/api/v1/assets", params={"active": True}).json()
    assert [a["name"] for a in page["items"]] == ["<b>bold</b>&co", "orders"]
    orders = client.get("/api/v1/assets/orders").json()
    assert {e["key"]: e["value"] for e in orders["state"]} == {"note": MARKUP, "watermark": 29}
    scopes = client.get("/api/v1/state/tasks", params={"dag_id": "daily"}).json()
    assert scopes["total"] == 2
    entries = client.get("/api/v1/state/task", params={
        "dag_id": "daily", "run_id": "manual__2024-05-01T00:00:00+00:00",
        "task_id": "load"}).json()
    assert entries[0]["value"] == {"rows": 12, "html": MARKUP}


def test_rejections_and_dead_letters_grouped(client: TestClient, seeded: Seeded) -> None:
    stats = client.get("/api/v1/rejected/stats").json()
    assert stats["total"] == 5
    assert {(s["watcher"], s["reason"], s["count"]) for s in stats["by_watcher_reason"]} == {
        ("paid", "missing amount", 3), ("paid", MARKUP, 2)}
    dlq = client.get("/api/v1/dead-letters", params={"topic": seeded.dlq_topic}).json()
    assert dlq["error"] is None and dlq["read"] == 3 and dlq["distinct"] == 2
    assert dlq["stats"]["reasons"] == {"missing amount": 1, MARKUP: 1, "<foreign>": 1}
    assert dlq["stats"]["watchers"] == {"paid": 1, "audit": 1}
    assert sorted((s["watcher"], s["reason"], s["count"])
                  for s in dlq["stats"]["by_watcher_reason"]) == [
        ("audit", MARKUP, 1), ("paid", "missing amount", 1)]
    ours = [r for r in dlq["items"] if not r["foreign"]]
    assert ours[0]["copies"] == 2 and ours[0]["rejections"]["audit"] == MARKUP
    foreign = next(r for r in dlq["items"] if r["foreign"])
    assert foreign["value"]["text"] is None
    assert base64.b64decode(foreign["value"]["base64"]) == b"\xff\xfe not utf-8"
    only = client.get("/api/v1/dead-letters", params={"topic": seeded.dlq_topic,
                                                      "watcher": "paid"}).json()
    assert only["total"] == 1
    assert client.get("/api/v1/dead-letters", params={"topic": "any.other"}).status_code == 404


def test_destinations_and_undelivered(client: TestClient, seeded: Seeded) -> None:
    hooks = {d["id"]: d for d in client.get("/api/v1/destinations").json()}["hooks"]
    assert hooks["cursor"] == seeded.event_ids[4] and hooks["configured"]
    assert hooks["failing"] and hooks["health"] == "failing" and hooks["lag_seconds"] == 1.5
    assert hooks["undeliverable"] == 1
    refused = client.get("/api/v1/undelivered", params={"destination": "hooks"}).json()
    assert [u["event"]["id"] for u in refused["items"]] == [seeded.event_ids[2]]


@pytest.mark.parametrize("path", [
    "/", f"/groups/{GROUP}", "/assets", "/assets/orders", "/assets/%3Cb%3Ebold%3C/b%3E%26co",
    "/events?since=2h", "/dead-letters", "/state?asset=orders",
    "/state?dag_id=daily&run_id=manual__2024-05-01T00:00:00%2B00:00&task_id=load&map_index=-1",
    "/destinations"])
def test_pages_show_values_as_text(client: TestClient, path: str) -> None:
    reply = client.get(path)
    assert reply.status_code == 200, reply.text[:500]
    assert "<script>document" not in reply.text and "<b>bold" not in reply.text
    assert reply.text.count("<script") == 1  # the console's own script only
    assert "script-src 'self'" in reply.headers["content-security-policy"]


def test_pages_escape_what_they_show(client: TestClient) -> None:
    group = client.get(f"/groups/{GROUP}").text
    assert "ValueError: &lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;" in group
    assert "&lt;b&gt;bold&lt;/b&gt;&amp;co" in client.get("/assets").text
    fragment = client.get("/", headers={"X-Console-Fragment": "1"}).text
    assert "<html" not in fragment and 'id="triggerers"' in fragment
    assert client.get("/assets/none-such").status_code == 404


def test_a_console_without_token_answers_only_loopback_hosts(client: TestClient) -> None:
    assert client.get("/api/v1/overview", headers={"Host": "127.0.0.1:8795"}).status_code == 200
    assert client.get("/api/v1/overview", headers={"Host": "localhost"}).status_code == 200
    refused = client.get("/api/v1/overview", headers={"Host": "attacker.example"})
    assert refused.status_code == 400 and "loopback" in refused.json()["detail"]
