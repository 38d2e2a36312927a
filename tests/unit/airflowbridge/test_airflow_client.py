"""The Airflow REST client against ``httpx.MockTransport``: authentication, and which
failures hold a message (AirflowUnavailableError) and which reject it (AirflowRequestError)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from sharedstream.airflowbridge.client import (
    PAGE_SIZE,
    AirflowClient,
    AirflowRequestError,
    AirflowUnavailableError,
)
from sharedstream.airflowbridge.envelope import MARKER
from sharedstream.airflowbridge.settings import AirflowInstanceSettings
from sharedstream.core.streamconfig import InfrastructureError

PASSWORD = "pw-Secret-4711"
TOKEN = "tok-Secret-0815"
Handler = Callable[[httpx.Request], httpx.Response]


class FakeAirflow:
    """Answers /auth/token with numbered JWTs and the API from ``api``; records requests."""

    def __init__(self, api: Handler) -> None:
        self.api = api
        self.logins = 0
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path == "/auth/token":
            self.logins += 1
            assert json.loads(request.content) == {"username": "bridge", "password": PASSWORD}
            return httpx.Response(201, json={"access_token": f"jwt-{self.logins}"})
        return self.api(request)

    def bearers(self) -> list[str]:
        return [r.headers["Authorization"] for r in self.requests
                if r.url.path != "/auth/token"]


def client(handler: Handler, *, token: str | None = None) -> AirflowClient:
    settings = AirflowInstanceSettings(
        base_url="http://airflow-a:8080/", token=token,
        username=None if token else "bridge", password=None if token else PASSWORD)
    return AirflowClient("team_a", settings, transport=httpx.MockTransport(handler))


def ok(_request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"ok": True})


async def test_login_once_then_the_cached_token_on_every_request() -> None:
    airflow = FakeAirflow(ok)
    api = client(airflow)
    await api.request("GET", "/api/v2/assets")
    await api.request("GET", "/api/v2/assets")
    await api.aclose()
    assert airflow.logins == 1
    assert airflow.bearers() == ["Bearer jwt-1", "Bearer jwt-1"]
    assert str(airflow.requests[1].url).startswith("http://airflow-a:8080/api/v2/assets")


async def test_a_static_token_is_used_as_is() -> None:
    airflow = FakeAirflow(ok)
    api = client(airflow, token=TOKEN)
    await api.request("GET", "/api/v2/assets")
    await api.aclose()
    assert airflow.logins == 0
    assert airflow.bearers() == [f"Bearer {TOKEN}"]


async def test_401_fetches_a_fresh_token_once_and_retries() -> None:
    def api(request: httpx.Request) -> httpx.Response:
        expired = request.headers["Authorization"] == "Bearer jwt-1"
        return httpx.Response(401) if expired else httpx.Response(200, json={"id": 1})

    airflow = FakeAirflow(api)
    response = await client(airflow).request("POST", "/api/v2/assets/events", json={})
    assert response.json() == {"id": 1}
    assert airflow.logins == 2
    assert airflow.bearers() == ["Bearer jwt-1", "Bearer jwt-2"]


async def test_401_after_a_fresh_token_holds_the_message() -> None:
    airflow = FakeAirflow(lambda _request: httpx.Response(401))
    with pytest.raises(AirflowUnavailableError, match="answered 401"):
        await client(airflow).request("GET", "/api/v2/assets")
    assert airflow.logins == 2 and len(airflow.bearers()) == 2


async def test_401_with_a_static_token_is_not_retried() -> None:
    airflow = FakeAirflow(lambda _request: httpx.Response(401))
    with pytest.raises(AirflowUnavailableError) as info:
        await client(airflow, token=TOKEN).request("GET", "/api/v2/assets")
    assert airflow.logins == 0 and len(airflow.requests) == 1
    assert TOKEN not in str(info.value)


@pytest.mark.parametrize("status", [500, 502, 503, 504, 429, 408, 403])
async def test_server_errors_and_throttling_are_infrastructure(status: int) -> None:
    airflow = FakeAirflow(lambda _request: httpx.Response(status, text=f"token {TOKEN}"))
    with pytest.raises(AirflowUnavailableError) as info:
        await client(airflow).request("GET", "/api/v2/assets")
    assert isinstance(info.value, InfrastructureError)
    assert str(info.value) == f"airflow 'team_a': GET /api/v2/assets answered {status}"


@pytest.mark.parametrize("error", [
    httpx.ConnectError("connection refused"), httpx.ReadTimeout("timed out"),
    httpx.RemoteProtocolError("server disconnected")])
async def test_network_failures_are_infrastructure(error: httpx.HTTPError) -> None:
    def api(_request: httpx.Request) -> httpx.Response:
        raise error

    with pytest.raises(AirflowUnavailableError, match=type(error).__name__):
        await client(FakeAirflow(api), token=TOKEN).request("GET", "/api/v2/assets")


@pytest.mark.parametrize("status", [400, 404, 409, 422])
async def test_other_4xx_reject_with_the_answer(status: int) -> None:
    def api(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"detail": "Asset with id 7 not found"})

    with pytest.raises(AirflowRequestError) as info:
        await client(FakeAirflow(api)).request("POST", "/api/v2/assets/events", json={})
    assert not isinstance(info.value, InfrastructureError)
    assert info.value.status == status
    assert str(info.value).startswith(
        f"airflow 'team_a': POST /api/v2/assets/events answered {status}: ")
    assert "Asset with id 7 not found" in str(info.value)


async def test_a_long_refusal_is_cut_in_the_message() -> None:
    airflow = FakeAirflow(lambda _request: httpx.Response(422, text="x" * 5000))
    with pytest.raises(AirflowRequestError) as info:
        await client(airflow).request("POST", "/api/v2/assets/events", json={})
    assert str(info.value).count("x") == 300


@pytest.mark.parametrize(("answer", "reason"), [
    (httpx.Response(500), "token request answered 500"),
    (httpx.Response(401, json={"detail": f"bad password {PASSWORD}"}),
     "token request answered 401"),
    (httpx.Response(200, json={"detail": "no token here"}), "no access_token in answer"),
    (httpx.ConnectError(f"refused, password={PASSWORD}"), "token request failed: ConnectError"),
])
async def test_a_failed_login_holds_and_never_shows_the_password(
        answer: httpx.Response | httpx.ConnectError, reason: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/auth/token"
        if isinstance(answer, Exception):
            raise answer
        return answer

    with pytest.raises(AirflowUnavailableError) as info:
        await client(handler).request("GET", "/api/v2/assets")
    assert str(info.value) == f"airflow 'team_a': {reason}"
    assert PASSWORD not in str(info.value) and PASSWORD not in repr(info.value)


def assets_api(assets: list[dict[str, Any]], calls: list[httpx.Request]) -> Handler:
    def api(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        offset, limit = int(request.url.params["offset"]), int(request.url.params["limit"])
        matching = [a for a in assets if a["uri"] == request.url.params["uri_pattern"]]
        return httpx.Response(200, json={"assets": matching[offset:offset + limit]})
    return api


async def test_a_missing_asset_resolves_to_none() -> None:
    calls: list[httpx.Request] = []
    assets = [{"id": 1, "name": "orders", "uri": "s3://b/orders"}]
    api = client(FakeAirflow(assets_api(assets, calls)))
    assert await api.resolve_asset("orders", "s3://b/other") is None
    assert await api.resolve_asset("renamed", "s3://b/orders") is None


async def test_resolve_matches_name_and_uri_across_pages_and_caches_the_id() -> None:
    calls: list[httpx.Request] = []
    uri = "s3://b/orders"
    assets = [{"id": n, "name": f"other-{n}", "uri": uri} for n in range(PAGE_SIZE + 5)]
    assets.append({"id": 999, "name": "orders", "uri": uri})
    api = client(FakeAirflow(assets_api(assets, calls)))
    assert await api.resolve_asset("orders", uri) == 999
    assert [int(c.url.params["offset"]) for c in calls] == [0, PAGE_SIZE]
    assert await api.resolve_asset("orders", uri) == 999
    assert len(calls) == 2  # cached
    assets.pop()  # the asset was deleted in the target
    assert await api.resolve_asset("orders", uri, refresh=True) is None
    assert len(calls) == 4


def events_api(events: list[dict[str, Any]]) -> Handler:
    def api(request: httpx.Request) -> httpx.Response:
        offset, limit = int(request.url.params["offset"]), int(request.url.params["limit"])
        return httpx.Response(200, json={"asset_events": events[offset:offset + limit]})
    return api


async def test_has_bridged_event_looks_for_the_exact_marker() -> None:
    marker = {"source": "team_b", "event_id": 42}
    events: list[dict[str, Any]] = [
        {"id": 1, "extra": None},
        {"id": 2, "extra": {"sharedstream_bridge": {"source": "team_b", "event_id": 41}}}]
    api = client(FakeAirflow(events_api(events)))
    since = datetime(2026, 1, 1, tzinfo=UTC)
    assert not await api.has_marked_event(7, MARKER, marker, since)
    events.append({"id": 3, "extra": {"rows": 1, "sharedstream_bridge": marker}})
    assert await api.has_marked_event(7, MARKER, marker, since)
