"""The embedded API's checks before anything connects (the e2e test runs it on Kafka)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger
from sharedstream.triggerer import StartupError, Triggerer

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def watcher(name: str, **kwargs: object) -> AssetWatcher:
    return AssetWatcher(name, KafkaSharedStreamTrigger(topics=["orders"], **kwargs))


def test_assets_are_checked_as_a_watcher_module_is() -> None:
    twice = [Asset("a", watchers=[watcher("w")]), Asset("b", watchers=[watcher("w")])]
    with pytest.raises(StartupError, match="embedded assets: watcher name 'w' is used by "
                                           "asset 'a' and asset 'b'"):
        Triggerer(assets=twice)
    with pytest.raises(StartupError, match="embedded assets: expected Asset objects, got str"):
        Triggerer(assets=["orders"])  # type: ignore[list-item]
    with pytest.raises(StartupError, match="embedded assets: no Asset given"):
        Triggerer(assets=[])
    looping = [Asset("a", watchers=[watcher("w", dlq_topic="orders")])]
    with pytest.raises(StartupError, match="dlq_topic 'orders' is a topic it watches"):
        Triggerer(assets=looping)


def test_the_embedded_example_plans_one_group_of_three_watchers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.delitem(sys.modules, "embedded_service", raising=False)
    import embedded_service

    triggerer = Triggerer(embedded_service.settings(),
                          assets=[embedded_service.valid_orders, embedded_service.paid_orders,
                                  embedded_service.orders_audit])
    [group] = triggerer.plan.groups
    assert group.watchers == {"valid_orders", "paid_orders", "orders_audit"}
    assert group.consumer_group == "embedded-service.orders"
