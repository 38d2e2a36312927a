"""One delivery of the sink to a target, against ``httpx.MockTransport``: an asset the
target lacks is a rejection with a readable reason; a target that cannot answer is an
infrastructure error (the message is held, never dead-lettered)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from sharedstream.airflowbridge.client import AirflowClient, AirflowUnavailableError
from sharedstream.airflowbridge.envelope import MARKER, Envelope
from sharedstream.airflowbridge.settings import AirflowInstanceSettings
from sharedstream.airflowbridge.sink import AirflowAssetSinkTrigger, AssetMissingError

URI = "s3://b/orders"
ENVELOPE = Envelope(source="team_b", asset_name="orders", asset_uri=URI, event_id=42,
                    timestamp="2026-01-01T10:00:00Z", extra={"rows": 7})


class Target:
    """A target instance holding ``assets`` (id -> name); records the events posted."""

    def __init__(self, assets: dict[int, str], post_status: int = 200) -> None:
        self.assets = assets
        self.post_status = post_status
        self.posted: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v2/assets":
            return httpx.Response(200, json={"assets": [
                {"id": i, "name": n, "uri": URI} for i, n in self.assets.items()]})
        if request.method == "GET":  # the duplicate check: nothing bridged yet
            return httpx.Response(200, json={"asset_events": []})
        body = json.loads(request.content)
        if self.post_status != 200:
            return httpx.Response(self.post_status, json={"detail": "no such asset"})
        if body["asset_id"] not in self.assets:
            return httpx.Response(404, json={"detail": f"Asset {body['asset_id']} not found"})
        self.posted.append(body)
        return httpx.Response(200, json={"id": 500 + len(self.posted)})


def target_client(target: Target) -> AirflowClient:
    return AirflowClient("team_a", AirflowInstanceSettings(base_url="http://a:8080", token="t"),
                         transport=httpx.MockTransport(target))


def sink() -> AirflowAssetSinkTrigger:
    return AirflowAssetSinkTrigger(topics=["bridge"], targets=["team_a"])


async def test_delivery_posts_the_extra_with_the_marker() -> None:
    target = Target({7: "orders"})
    assert await sink()._deliver(target_client(target), ENVELOPE) == 501
    assert target.posted == [{"asset_id": 7, "extra": {
        "rows": 7, MARKER: {"source": "team_b", "event_id": 42}}}]


async def test_an_asset_missing_in_the_target_is_rejected_with_its_name_and_uri() -> None:
    with pytest.raises(AssetMissingError) as info:
        await sink()._deliver(target_client(Target({})), ENVELOPE)
    assert str(info.value) == f"airflow 'team_a' has no asset name='orders' uri='{URI}'"


async def test_an_asset_deleted_since_it_was_cached_is_rejected_after_the_404() -> None:
    target = Target({7: "orders"})
    client = target_client(target)
    assert await client.resolve_asset("orders", URI) == 7  # cached
    target.assets.clear()
    with pytest.raises(AssetMissingError) as info:
        await sink()._deliver(client, ENVELOPE)
    assert str(info.value).startswith(
        "airflow 'team_a': POST /api/v2/assets/events answered 404: ")
    assert str(info.value).endswith("(asset no longer exists)")


async def test_an_asset_recreated_since_it_was_cached_gets_the_event_under_its_new_id() -> None:
    target = Target({7: "orders"})
    client = target_client(target)
    assert await client.resolve_asset("orders", URI) == 7
    target.assets = {8: "orders"}
    assert await sink()._deliver(client, ENVELOPE) == 501
    assert [p["asset_id"] for p in target.posted] == [8]


async def test_a_target_that_cannot_answer_holds_the_message() -> None:
    with pytest.raises(AirflowUnavailableError):
        await sink()._deliver(target_client(Target({7: "orders"}, post_status=503)), ENVELOPE)
