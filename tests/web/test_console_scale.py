"""The console's lists at 10,000 watchers (issue 42): paged, searched, totals, stable order.

The ``scale`` fixture (conftest.py) seeds PostgreSQL the way ``sharedstream run`` writes
(bench/console_pages.py's ``seed``): ``watcher-00000`` .. ``watcher-09999`` in
``scale.orders``, the first ten of them also in ``scale.refunds``, an asset per watcher
and a live triggerer whose ``/status`` runs them all (every hundredth not subscribed,
each wanting its own key) and holds 1,000 messages, offset n failed by watcher n*7
mod 10,000. Speed is measured by ``python -m bench --console-pages``, never here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from bench.console_pages import BIG, HELD, SMALL, SMALL_SIZE, asset_name, watcher_name
from starlette.testclient import TestClient

pytestmark = pytest.mark.integration

WATCHERS = 10_000
TOTAL = WATCHERS + SMALL_SIZE


@pytest.fixture
def client(scale: Any, scale_app: Any) -> Iterator[TestClient]:
    scale.heartbeat.beat()  # alive: a row unseen for 30 s is stale
    yield TestClient(scale_app)


def get(client: TestClient, path: str, **params: Any) -> Any:
    reply = client.get(path, params=params)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_every_watcher_is_on_exactly_one_page_in_name_then_group_order(
        client: TestClient) -> None:
    seen = []
    for offset in range(0, TOTAL, 500):
        page = get(client, "/api/v1/watchers", limit=500, offset=offset)
        assert page["total"] == TOTAL and page["offset"] == offset and page["limit"] == 500
        assert len(page["items"]) == min(500, TOTAL - offset)
        seen += [(w["name"], w["consumer_group"]) for w in page["items"]]
    assert len(set(seen)) == TOTAL
    assert seen == sorted(seen)
    assert seen[:2] == [(watcher_name(0), BIG), (watcher_name(0), SMALL)]
    assert seen[-1] == (watcher_name(WATCHERS - 1), BIG)
    assert get(client, "/api/v1/watchers", limit=500, offset=TOTAL)["items"] == []


def test_a_page_asked_again_is_the_same_page(client: TestClient) -> None:
    first = get(client, "/api/v1/watchers", limit=100, offset=5_000)
    again = get(client, "/api/v1/watchers", limit=100, offset=5_000)
    assert [w["name"] for w in first["items"]] == [w["name"] for w in again["items"]]
    assert first["items"][0]["name"] == watcher_name(5_000 - SMALL_SIZE)


def test_watchers_are_searched_by_part_of_the_name_in_any_case(client: TestClient) -> None:
    found = get(client, "/api/v1/watchers", q="R-0424", limit=100)
    assert found["total"] == 10
    assert [w["name"] for w in found["items"]] == [watcher_name(4240 + i) for i in range(10)]
    both = get(client, "/api/v1/watchers", q="watcher-0000", limit=5, offset=5)
    assert both["total"] == 2 * SMALL_SIZE  # ten names, each in both groups
    assert [(w["name"], w["consumer_group"]) for w in both["items"]] == [
        (watcher_name(2), SMALL), (watcher_name(3), BIG), (watcher_name(3), SMALL),
        (watcher_name(4), BIG), (watcher_name(4), SMALL)]
    one_group = get(client, "/api/v1/watchers", q="watcher-0000", group=SMALL)
    assert one_group["total"] == SMALL_SIZE
    assert {w["consumer_group"] for w in one_group["items"]} == {SMALL}
    assert get(client, "/api/v1/watchers", q="no such watcher") == {
        "items": [], "total": 0, "limit": 100, "offset": 0}


def test_the_group_filter_still_works_and_rows_say_what_the_triggerer_reports(
        client: TestClient) -> None:
    small = get(client, "/api/v1/watchers", group=SMALL)
    assert small["total"] == SMALL_SIZE
    rows = {w["name"]: w for w in get(client, "/api/v1/watchers", q="watcher-000",
                                      group=BIG)["items"]}
    assert rows[watcher_name(99)]["present"] is False  # every hundredth not subscribed
    assert rows[watcher_name(98)]["present"] is True
    assert rows[watcher_name(7)]["held"] == 1 and rows[watcher_name(8)]["held"] == 0
    assert rows[watcher_name(7)]["match"] == {"key": ["7"]}
    assert rows[watcher_name(7)]["topics"] == ["scale-orders"]


def test_held_messages_are_paged_and_searched(client: TestClient) -> None:
    offsets = []
    for offset in range(0, HELD, 300):
        page = get(client, "/api/v1/held", limit=300, offset=offset)
        assert page["total"] == HELD
        offsets += [h["offset"] for h in page["items"]]
    assert offsets == list(range(HELD))
    by_watcher = get(client, "/api/v1/held", q="WATCHER-00007")
    assert by_watcher["total"] == 1 and by_watcher["items"][0]["offset"] == 1
    assert get(client, "/api/v1/held", q="scale-ord", limit=1)["total"] == HELD  # topic
    assert get(client, "/api/v1/held", watcher=watcher_name(7))["total"] == 1  # as before
    assert get(client, "/api/v1/held", q="nothing held so")["total"] == 0


def test_assets_are_paged_and_searched_in_any_case(client: TestClient) -> None:
    page = get(client, "/api/v1/assets", limit=100, offset=9_950)
    assert page["total"] == WATCHERS
    assert [a["name"] for a in page["items"]] == [asset_name(9_950 + i) for i in range(50)]
    found = get(client, "/api/v1/assets", q="SET-0424")
    assert [a["name"] for a in found["items"]] == [asset_name(4240 + i) for i in range(10)]
    assert get(client, "/api/v1/assets", q="asset-0424_")["total"] == 0  # _ is itself


def test_the_watchers_page_shows_one_page_its_total_and_links_to_the_next(
        client: TestClient) -> None:
    page = client.get("/watchers", params={"q": "r-04"}).text
    assert '<span id="count-watchers">1000</span>' in page
    assert page.count('<tr class="watcher"') == 50
    assert f'data-watcher="{watcher_name(4049)}"' in page
    assert f'data-watcher="{watcher_name(4050)}"' not in page
    assert "1\N{EN DASH}50 of 1000" in page and "offset=50" in page and "q=r-04" in page
    second = client.get("/watchers", params={"q": "r-04", "offset": "50"}).text
    assert f'data-watcher="{watcher_name(4050)}"' in second and "previous" in second


def test_the_held_and_assets_pages_are_paged_and_searched(client: TestClient) -> None:
    held = client.get("/held", params={"q": "watcher-00007"}).text
    assert '<span id="count-held">1 held</span>' in held
    assert held.count('<tr class="held"') == 1
    every = client.get("/held").text
    assert '<span id="count-held">1000 held</span>' in every
    assert every.count('<tr class="held"') == 50 and "1\N{EN DASH}50 of 1000" in every
    assets = client.get("/assets", params={"q": "set-0424"}).text
    assert assets.count(f'href="/assets/{asset_name(4240)}"') == 1
    assert "1\N{EN DASH}10 of 10" in assets


def test_pages_name_a_big_groups_first_watchers_and_link_to_the_rest(
        client: TestClient) -> None:
    for path in ("/", f"/groups/{BIG}"):
        page = client.get(path).text
        assert watcher_name(4) in page and watcher_name(5) not in page, path
        assert f"and {WATCHERS - 5} more" in page, path
        assert f'href="/watchers?group={BIG}"' in page, path
    group = client.get(f"/groups/{BIG}").text
    assert group.count('<tr class="held"') == 50 and 'id="more-held"' in group
    assert f"{WATCHERS - WATCHERS // 100} of {WATCHERS}" in group  # members subscribed
