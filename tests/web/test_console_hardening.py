"""The console against hostile or broken input (issue 25, items 12 to 15), on real databases.

A ``triggerer_process`` row is written by any host that can reach the database, so its
``status_url`` and whatever answers there are untrusted: the console fetches only from
``[web] status_networks``, keeps only the typed fields of the document, and shows a
document it cannot use as one triggerer's error, never as a 500. Page parameters are
bounded as the API's are (a 400 naming the parameter and its range, never a database
error), the API's errors are ``{"detail": "..."}`` with 400 or 404, and no page loads
anything from another origin.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_network
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from console_seed import GROUP, StatusServer, status_document
from starlette.testclient import TestClient

from sharedstream.statestore.store import StateStore
from sharedstream.triggerer.config import load_config, parse_networks
from sharedstream.triggerer.heartbeat import Heartbeat
from sharedstream.web.app import create_app
from sharedstream.web.command import web
from sharedstream.web.settings import ConsoleSettings

pytestmark = pytest.mark.integration

INT32 = 2**31 - 1
INT64 = 2**63 - 1


@pytest.fixture
def servers() -> Iterator[list[StatusServer]]:
    started: list[StatusServer] = []
    yield started
    for server in started:
        server.stop()


def triggerer(store: StateStore, status_url: str) -> str:
    """A live heartbeat row naming ``status_url``, written as ``sharedstream run`` does."""
    beat = Heartbeat(store, version="0.1.0", watchers=["dags/orders.py"], groups=[GROUP],
                     status_url=status_url)
    beat.register()
    return beat.id


def console(store: StateStore, **options: Any) -> TestClient:
    settings = ConsoleSettings(trusted_hosts=("testserver",), **options)
    return TestClient(create_app(settings, store, sampler=False),
                      raise_server_exceptions=False)


def by_id(client: TestClient) -> dict[str, dict[str, Any]]:
    answer = client.get("/api/v1/triggerers")
    assert answer.status_code == 200, answer.text
    return {t["id"]: t for t in answer.json()["items"]}


# -- item 12: where status is fetched from, and what of it is kept ----------------------


def test_a_status_url_outside_the_allowed_networks_is_never_fetched(
        postgres_store: StateStore, servers: list[StatusServer]) -> None:
    allowed = StatusServer(status_document("allowed"))
    outside = StatusServer(status_document("outside"), host="127.0.0.2")
    servers += [allowed, outside]
    allowed_id = triggerer(postgres_store, allowed.url)
    outside_id = triggerer(postgres_store, outside.url)
    client = console(postgres_store, status_networks=(ip_network("127.0.0.1/32"),))

    found = by_id(client)
    # Both fetches belong to the one snapshot this answer was built from: the allowed
    # server's request proves the console was fetching when it passed the other by.
    assert allowed.requests == 1 and found[allowed_id]["status_error"] is None
    assert found[allowed_id]["not_ready"] == status_document("x")["not_ready"]
    assert outside.requests == 0
    assert found[outside_id]["status_error"] == (
        "status not fetched: address not allowed (127.0.0.2 is outside [web] "
        "status_networks)")
    assert found[outside_id]["health"] == "unreachable"
    assert client.get(f"/api/v1/triggerers/{outside_id}").json()["status"] is None
    overview = client.get("/")
    assert overview.status_code == 200
    assert "status not fetched: address not allowed" in overview.text
    assert outside.requests == 0


def test_only_the_typed_fields_of_a_status_document_are_returned(
        postgres_store: StateStore, servers: list[StatusServer]) -> None:
    document = status_document("p")
    document["metadata"] = {"token": "instance-credentials"}
    document["groups"][0]["secret"] = "hidden"
    server = StatusServer(document)
    servers.append(server)
    process = triggerer(postgres_store, server.url)

    status = console(postgres_store).get(f"/api/v1/triggerers/{process}").json()["status"]
    assert server.requests == 1
    assert "instance-credentials" not in json.dumps(status)
    assert set(status) == {"version", "process", "ready", "not_ready", "groups",
                           "destinations"}
    assert "secret" not in status["groups"][0]
    assert status["groups"][0]["held"][0]["reasons"] == document["groups"][0]["held"][0][
        "reasons"]


@pytest.mark.parametrize("shape", [
    {"ready": True, "groups": ["not a group"]},
    {"ready": True, "groups": [{"consumer_group": GROUP, "partitions": [{"topic": "t"}]}]},
    {"ready": True, "groups": {"consumer_group": GROUP}},
    ["a", "list"],
], ids=["group-is-text", "partition-without-number", "groups-not-a-list", "not-an-object"])
def test_a_status_document_of_another_shape_is_unreadable_not_a_500(
        postgres_store: StateStore, servers: list[StatusServer], shape: Any) -> None:
    good = StatusServer(status_document("good"))
    odd = StatusServer(json.dumps(shape).encode())
    servers += [good, odd]
    good_id = triggerer(postgres_store, good.url)
    odd_id = triggerer(postgres_store, odd.url)
    client = console(postgres_store)

    for path in ("/", "/api/v1/overview", "/api/v1/groups", "/api/v1/held",
                 "/api/v1/watchers", f"/api/v1/triggerers/{odd_id}",
                 f"/groups/{GROUP}", f"/api/v1/groups/{GROUP}", "/destinations"):
        answer = client.get(path)
        assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
    found = by_id(client)
    assert odd.requests >= 1
    assert found[odd_id]["status_error"].startswith("status unreadable: ")
    assert found[good_id]["status_error"] is None
    # The well-formed triggerer's group is still shown, from its document.
    groups = client.get("/api/v1/groups").json()["items"]
    assert [g["triggerers"] for g in groups] == [[good_id]]


@pytest.mark.parametrize("sized", [True, False], ids=["content-length", "until-close"])
def test_a_status_document_over_the_size_cap_is_refused(
        postgres_store: StateStore, servers: list[StatusServer], sized: bool) -> None:
    document = status_document("big")
    document["padding"] = "x" * (10 * 1024 * 1024)
    server = StatusServer(json.dumps(document).encode(), sized=sized)
    servers.append(server)
    process = triggerer(postgres_store, server.url)

    client = console(postgres_store)
    found = by_id(client)[process]
    assert server.requests == 1
    assert found["status_error"] == "status document larger than 1 MiB"
    assert client.get(f"/api/v1/triggerers/{process}").json()["status"] is None


def test_a_status_server_dripping_its_answer_is_cut_off_at_the_timeout(
        postgres_store: StateStore) -> None:
    """A server that answers a byte at a time, forever, holds a fetch no longer than the
    timeout: the deadline covers the whole exchange, not each read."""
    stop = threading.Event()
    dripped = threading.Event()

    class Drip(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            with contextlib.suppress(OSError):
                # 3 s of drips, three times the timeout, then the answer ends (a
                # console without the deadline reads it all and fails below).
                for _ in range(15):
                    if stop.wait(0.2):
                        break
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    dripped.set()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Drip)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        process = triggerer(postgres_store, f"http://127.0.0.1:{server.server_address[1]}/")
        found = by_id(console(postgres_store, status_timeout=1.0))[process]
        assert dripped.is_set()  # bytes kept coming, each well within the timeout
        assert found["status_error"] == "status did not answer within 1s"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


# -- item 13: page parameters bounded like the API's -----------------------------------

OUT_OF_RANGE = [
    ("/events?partition=2147483648", "partition", f"0 to {INT32}"),
    ("/events?partition=-1", "partition", f"0 to {INT32}"),
    (f"/events?before={10**23}", "before", f"1 to {INT64}"),
    (f"/events?message_offset={10**23}", "message_offset", f"0 to {INT64}"),
    ("/events?partition=abc", "partition", f"0 to {INT32}"),
    (f"/assets?offset={10**23}", "offset", "0 to 1000000"),
    (f"/assets/orders?before={10**23}", "before", f"1 to {INT64}"),
    (f"/dead-letters?rejected_offset={10**23}", "rejected_offset", "0 to 1000000"),
    (f"/dead-letters?offset={10**23}", "offset", "0 to 1000000"),
    (f"/state?offset={10**23}", "offset", "0 to 1000000"),
    (f"/state?dag_id=d&run_id=r&task_id=t&map_index={10**23}", "map_index",
     f"-1 to {INT32}"),
    (f"/destinations?offset={10**23}", "offset", "0 to 1000000"),
]


@pytest.mark.parametrize(("path", "name", "bounds"), OUT_OF_RANGE,
                         ids=[p for p, _, _ in OUT_OF_RANGE])
def test_an_out_of_range_page_parameter_is_a_400_naming_it(
        store: StateStore, path: str, name: str, bounds: str) -> None:
    store.register_asset("orders")
    answer = console(store).get(path)
    assert answer.status_code == 400, answer.text[:300]
    assert answer.headers["content-type"].startswith("text/html")
    assert f"{name} must be an integer from {bounds}" in answer.text


def test_the_largest_values_in_range_are_answered(store: StateStore) -> None:
    store.register_asset("orders")
    client = console(store)
    for path in (f"/events?partition={INT32}&message_offset={INT64}&before={INT64}",
                 f"/assets/orders?partition={INT32}&before={INT64}",
                 "/assets?offset=1000000", "/dead-letters?rejected_offset=1000000",
                 f"/state?dag_id=d&run_id=r&task_id=t&map_index={INT32}",
                 f"/api/v1/events?partition={INT32}&message_offset={INT64}"
                 f"&before={INT64}", "/events?partition=&before="):
        answer = client.get(path)
        assert answer.status_code == 200, (path, answer.text[:300])


def test_the_api_answers_the_same_bounds(store: StateStore) -> None:
    client = console(store)
    answer = client.get("/api/v1/events?partition=2147483648")
    assert answer.status_code == 400
    assert answer.json() == {
        "detail": f"partition must be an integer from 0 to {INT32}"}


# -- item 14: no script or style from elsewhere ---------------------------------------


def test_there_is_no_page_loading_swagger_from_a_cdn(store: StateStore) -> None:
    client = console(store)
    assert client.get("/api/v1/docs").status_code == 404
    policies = set()
    for path in ("/", "/api/v1/docs", "/api/v1/openapi.json", "/events"):
        answer = client.get(path)
        assert "cdn.jsdelivr.net" not in answer.text, path
        policies.add(answer.headers["content-security-policy"])
    assert len(policies) == 1 and "unsafe-inline" not in policies.pop()
    assert client.get("/api/v1/openapi.json").json()["paths"]


# -- item 15: the error contract ---------------------------------------------------------


def test_a_bad_parameter_is_a_400_with_one_detail_not_echoing_the_input(
        store: StateStore) -> None:
    client = console(store)
    for path, start in [("/api/v1/events?before=abc", "before must be an integer from 1 to"),
                        ("/api/v1/triggerers?state=sleepy", "state: "),
                        ("/api/v1/triggerers?limit=0", "limit must be an integer from 1 to 500"),
                        ("/api/v1/events?since=99999999999999d", "since: "),
                        ("/api/v1/events?until=999999999d", "until: "),
                        ("/api/v1/dead-letters", "topic: ")]:
        answer = client.get(path)
        assert answer.status_code == 400, (path, answer.status_code, answer.text)
        body = answer.json()
        assert set(body) == {"detail"} and isinstance(body["detail"], str), path
        assert body["detail"].startswith(start), (path, body)
        assert "abc" not in body["detail"] and "sleepy" not in body["detail"]
        assert "C int" not in body["detail"] and "\n" not in body["detail"]
    schema = client.get("/api/v1/openapi.json").json()
    codes = {code for spec in schema["paths"].values() for op in spec.values()
             for code in op["responses"]}
    assert "422" not in codes


def test_an_unknown_group_has_no_lag_series(store: StateStore) -> None:
    client = console(store)
    answer = client.get("/api/v1/groups/nobody/lag")
    assert answer.status_code == 404
    assert answer.json() == {"detail": "no consumer group 'nobody'"}
    assert client.get("/api/v1/groups/nobody").status_code == 404


def test_status_networks_come_from_the_config_and_a_bad_one_is_one_error_line(
        tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text('[web]\nstatus_networks = ["10.0.0.1/8", "fd00::/8"]\n')
    assert parse_networks(load_config(good, env={}).web.status_networks) == (
        ip_network("10.0.0.0/8"), ip_network("fd00::/8"))
    from_env = load_config(None, env={"SHAREDSTREAM__WEB__STATUS_NETWORKS": '["::1/128"]'})
    assert parse_networks(from_env.web.status_networks) == (ip_network("::1/128"),)
    assert parse_networks(load_config(None, env={}).web.status_networks) == (
        ip_network("127.0.0.0/8"), ip_network("::1/128"))

    bad = tmp_path / "bad.toml"
    bad.write_text('[web]\nstatus_networks = ["10.0.0.0/33"]\n')
    result = CliRunner().invoke(web, ["--config", str(bad), "--database-url",
                                      f"sqlite:///{tmp_path / 'x.db'}"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: [web] in "), lines
    assert "status_networks: '10.0.0.0/33' does not appear to be an IPv4 or IPv6 network" \
        in lines[0]
