from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import select

from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger
from sharedstream.statestore import AssetScope, StateStore
from sharedstream.statestore.models import asset as asset_table
from sharedstream.triggerer.registration import (
    CohortMismatchError,
    GroupDeclaration,
    register_assets,
    register_groups,
)


@pytest.fixture
def store(db_url: str) -> Iterator[StateStore]:
    store = StateStore.from_url(db_url)
    store.upgrade()
    yield store
    store.close()


def _asset(name: str, watcher: str) -> Asset:
    trigger = KafkaSharedStreamTrigger(topics=[name])
    # Airflow's Kafka form (host:port/topic): another draws the registration's warning.
    return Asset(name, uri=f"kafka://localhost:9092/{name}",
                 watchers=[AssetWatcher(watcher, trigger)])


def _active(store: StateStore) -> dict[str, bool]:
    with store.engine.connect() as c:
        return {r.name: r.active for r in c.execute(select(asset_table.c.name,
                                                           asset_table.c.active))}


def test_assets_created_deactivated_and_reactivated_keeping_state(store: StateStore) -> None:
    ids = register_assets(store, [_asset("orders", "w1"), _asset("payments", "w2")])
    assert set(ids) == {"orders", "payments"}
    store.asset(AssetScope(name="payments")).set("cursor", 7)

    register_assets(store, [_asset("orders", "w1")])
    assert _active(store) == {"orders": True, "payments": False}
    assert store.asset(AssetScope(name="payments")).get("cursor") == 7

    again = register_assets(store, [_asset("orders", "w1"), _asset("payments", "w2")])
    assert again == ids
    assert _active(store) == {"orders": True, "payments": True}


KEY = ("kafka-shared-stream", ("orders",), "kafka_default")


def test_same_watcher_set_scales_out(store: StateStore) -> None:
    group = GroupDeclaration(KEY, "triggerer.orders", frozenset({"a", "b"}))
    register_groups(store, [group], takeover=False)
    register_groups(store, [group], takeover=False)


def test_different_watcher_set_refused_naming_difference(store: StateStore) -> None:
    register_groups(store, [GroupDeclaration(KEY, "triggerer.orders", frozenset({"a", "b"}))],
                    takeover=False)
    changed = GroupDeclaration(KEY, "triggerer.orders", frozenset({"a", "c"}))
    with pytest.raises(CohortMismatchError) as info:
        register_groups(store, [changed], takeover=False)
    message = str(info.value)
    assert "triggerer.orders" in message
    assert "adds ['c']" in message and "drops ['b']" in message
    assert "--takeover" in message

    register_groups(store, [changed], takeover=True)
    register_groups(store, [changed], takeover=False)


def test_groups_of_different_group_ids_on_the_same_topics_are_kept_apart(
        store: StateStore) -> None:
    """Two deployments reading the same topics with their own ``group.id`` are two
    consumer groups: each has its own recorded watcher set (issue 41: they were merged
    under the topics and connection alone, so the second was refused, or took over)."""
    register_groups(store, [GroupDeclaration(KEY, "blue.orders", frozenset({"a"}))],
                    takeover=False)
    register_groups(store, [GroupDeclaration(KEY, "green.orders", frozenset({"b"}))],
                    takeover=False)
    from sharedstream.triggerer.registration import recorded_reads

    reads = recorded_reads(store)
    assert set(reads["a"]) == {"blue.orders"} and set(reads["b"]) == {"green.orders"}


def test_many_assets_register_in_one_transaction_with_their_ids(store: StateStore) -> None:
    """10,000 watchers' assets took a transaction each (20 s on SQLite at start-up): the
    bulk registration is one transaction, in statements of a few hundred rows, and gives
    each asset the id it keeps (and reactivates one, updating its uri)."""
    from sqlalchemy import event

    names = [(f"asset-{i}", f"kafka://t/{i}") for i in range(1_200)]
    first = store.register_asset("asset-7", None)
    store.deactivate_asset("asset-7")
    transactions: list[object] = []

    def began(connection: object) -> None:
        transactions.append(connection)

    event.listen(store.engine, "begin", began)
    try:
        ids = store.register_assets(names)
    finally:
        event.remove(store.engine, "begin", began)
    assert len(transactions) == 1
    assert len(ids) == 1_200 and len(set(ids.values())) == 1_200
    assert ids["asset-7"] == first
    with store.engine.connect() as c:
        rows = {r.name: (r.id, r.uri, r.active) for r in c.execute(
            select(asset_table.c.name, asset_table.c.id, asset_table.c.uri,
                   asset_table.c.active))}
    assert rows == {name: (ids[name], uri, True) for name, uri in names}
    assert store.register_assets(names) == ids
