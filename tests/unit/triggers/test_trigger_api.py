"""The trigger-side value types and hooks users write against."""

from __future__ import annotations

import pytest

import sharedstream
from sharedstream import Asset, AssetWatcher, BaseEventTrigger, TriggerEvent

pytestmark = pytest.mark.unit


class Plain(BaseEventTrigger):
    def serialize(self) -> tuple[str, dict[str, object]]:
        return "Plain", {}


def test_public_names_are_exported() -> None:
    for name in ("Asset", "AssetWatcher", "TriggerEvent", "BaseEventTrigger", "KafkaMessage",
                 "reject_shared_stream_event"):
        assert hasattr(sharedstream, name)


def test_asset_and_watcher_validate_names() -> None:
    asset = Asset("orders", uri="kafka://broker:9092/orders",
                  watchers=[AssetWatcher("w1", Plain())])
    assert asset.watchers[0].name == "w1"
    with pytest.raises(ValueError, match="invalid watcher name"):
        AssetWatcher("bad name", Plain())
    with pytest.raises(TypeError, match="BaseEventTrigger"):
        AssetWatcher("w", object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="invalid asset name"):
        Asset(" orders")
    # Stored as text in `asset.uri`: PostgreSQL refuses a NUL, every backend a lone
    # surrogate, so they are refused here, when the module loads, not at registration.
    for uri in ("kafka://broker:9092/ord\x00ers", "kafka://broker:9092/\udcff"):
        with pytest.raises(ValueError, match="printable"):
            Asset("orders", uri=uri)
    with pytest.raises(ValueError, match="listed twice"):
        Asset("a", watchers=[AssetWatcher("w", Plain()), AssetWatcher("w", Plain())])


def test_asset_state_store_is_injected_before_use() -> None:
    trigger = Plain()
    with pytest.raises(RuntimeError, match="not available yet"):
        _ = trigger.asset_state_store
    trigger.asset_state_store = {"k": 1}
    assert trigger.asset_state_store == {"k": 1}


async def test_defaults_not_shared_run_unsupported_one_event_per_message() -> None:
    trigger = Plain()
    assert trigger.shared_stream_key() is None
    with pytest.raises(NotImplementedError):
        Plain.create_shared_stream_producer({})

    async def stream():  # type: ignore[no-untyped-def]
        yield "m1"
        yield "m2"

    events = [e async for e in trigger.filter_shared_stream(stream())]
    assert events == [TriggerEvent("m1"), TriggerEvent("m2")]
