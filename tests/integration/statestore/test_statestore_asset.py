"""Asset state: advance ordering, writer columns, lifecycle, sweep, cascade, JSON."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from statestore_helpers import FakeClock

from sharedstream.statestore import AssetScope, StateStore, TaskScope, Writer
from sharedstream.statestore.events import insert_events
from sharedstream.statestore.models import asset, asset_event, asset_state_store


def test_advance_numbers(store: StateStore) -> None:
    orders = store.asset(AssetScope(name="orders"))
    assert orders.advance("wm", 10) is True
    assert orders.advance("wm", 9) is False
    assert orders.advance("wm", 10) is False
    assert orders.advance("wm", 10.5) is True
    assert orders.get("wm") == 10.5


def test_advance_instants_strings_lists(store: StateStore) -> None:
    orders = store.asset(AssetScope(name="orders"))
    assert orders.advance("at", "2024-01-01T00:30:00+02:00") is True
    # 23:00Z on Dec 31 is after 22:30Z (the instant above) though it sorts lower as text.
    assert orders.advance("at", "2023-12-31T23:00:00Z") is True
    assert orders.advance("at", "2023-12-31T22:59:00+00:00") is False
    assert orders.advance("name", "b") is True
    assert orders.advance("name", "a") is False
    assert orders.advance("pos", [1, 5]) is True
    assert orders.advance("pos", [1, 4, 9]) is False
    assert orders.advance("pos", [1, 5, 0]) is True
    assert orders.get("pos") == [1, 5, 0]


def test_advance_mixed_types_raise(store: StateStore) -> None:
    orders = store.asset(AssetScope(name="orders"))
    orders.advance("wm", 1)
    with pytest.raises(TypeError):
        orders.advance("wm", "2")
    with pytest.raises(TypeError):
        orders.advance("other", {"a": 1})
    assert orders.get("wm") == 1
    assert orders.get("other") is None


def _writer(store: StateStore, name: str, key: str) -> tuple[str, str]:
    with store.engine.connect() as connection:
        row = connection.execute(
            sa.select(asset_state_store.c.writer_kind, asset_state_store.c.writer_id)
            .join(asset, asset.c.id == asset_state_store.c.asset_id)
            .where(asset.c.name == name, asset_state_store.c.key == key)
        ).one()
    return row.writer_kind, row.writer_id


def test_writer_columns(store: StateStore) -> None:
    job = TaskScope("dag", "run", "task", 3)
    store.asset(AssetScope(name="a")).set("api_key", 1)
    store.asset(AssetScope(name="a"), writer=Writer.watcher("orders_watcher")).advance("w", 1)
    store.asset(AssetScope(name="a"), writer=Writer.task(job)).set("t", 1)
    assert _writer(store, "a", "api_key") == ("api", "api")
    assert _writer(store, "a", "w") == ("watcher", "orders_watcher")
    assert _writer(store, "a", "t") == ("task", "dag/run/task/3")
    store.asset(AssetScope(name="a"), writer=Writer.api("cli")).advance("w", 2)
    assert _writer(store, "a", "w") == ("api", "cli")


def test_scope_by_uri_and_id(store: StateStore) -> None:
    asset_id = store.register_asset("orders", uri="kafka://orders")
    store.asset(AssetScope(uri="kafka://orders")).set("k", 1)
    assert store.asset(AssetScope(asset_id=asset_id)).get("k") == 1
    assert store.asset(AssetScope(name="orders")).get("k") == 1
    with pytest.raises(LookupError):
        store.asset(AssetScope(uri="kafka://nope")).set("k", 1)
    assert store.asset(AssetScope(uri="kafka://nope")).get("k", default=0) == 0


def test_deactivate_and_sweep(store: StateStore, clock: FakeClock) -> None:
    store.register_asset("gone")
    store.register_asset("back")
    store.register_asset("live")
    for name in ("gone", "back", "live"):
        store.asset(AssetScope(name=name)).set("k", name)
    assert store.deactivate_asset("gone") is True
    assert store.deactivate_asset("back") is True
    assert store.deactivate_asset("gone") is False
    clock.advance(timedelta(days=3))
    store.register_asset("back")  # reactivated: never swept

    early = store.sweep(timedelta(days=7))
    assert (early.assets, early.rows) == ([], 0)
    clock.advance(timedelta(days=5))
    dry = store.sweep(timedelta(days=7), dry_run=True)
    assert (dry.assets, dry.rows) == (["gone"], 1)
    assert store.asset(AssetScope(name="gone")).get("k") == "gone"
    report = store.sweep(timedelta(days=7))
    assert (report.assets, report.rows) == (["gone"], 1)
    assert store.asset(AssetScope(name="gone")).get("k") is None
    assert store.asset(AssetScope(name="back")).get("k") == "back"
    assert store.asset(AssetScope(name="live")).get("k") == "live"
    with store.engine.connect() as connection:  # the asset row itself is kept
        assert connection.execute(
            sa.select(asset.c.active).where(asset.c.name == "gone")).scalar_one() is False


def test_delete_asset_cascades(store: StateStore, clock: FakeClock) -> None:
    asset_id = store.register_asset("orders")
    store.asset(AssetScope(name="orders")).set("k", 1)
    with store.engine.begin() as connection:
        insert_events(connection, [dict(
            asset_id=asset_id, watcher="w", payload="{}", topic="t", topic_id="tid",
            partition=0, offset=1, event_index=0, created_at=clock.now)])
    assert store.delete_asset("orders") is True
    with store.engine.connect() as connection:
        for table in (asset_state_store, asset_event):
            assert connection.execute(
                sa.select(sa.func.count()).select_from(table)).scalar_one() == 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=20,
).filter(lambda v: v is not None)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=json_values)
def test_json_round_trip(store: StateStore, value: Any) -> None:
    key = uuid.uuid4().hex
    store.task(TaskScope("d", "r", "t")).set(key, value)
    store.asset(AssetScope(name="json")).set(key, value)
    assert store.task(TaskScope("d", "r", "t")).get(key) == value
    assert store.asset(AssetScope(name="json")).get(key) == value
