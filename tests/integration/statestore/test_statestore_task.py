"""Task state: scopes, values, retention, expiry, cleanup, clear_on_success."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import sqlalchemy as sa
from statestore_helpers import FakeClock, MakeStore

from sharedstream.statestore import (
    NEVER_EXPIRE,
    AssetScope,
    StateStore,
    TaskScope,
    ValueTooLargeError,
)
from sharedstream.statestore.models import asset_state_store, task_state_store


def scope(map_index: int = -1, task_id: str = "submit") -> TaskScope:
    return TaskScope("daily_load", "run-1", task_id, map_index=map_index)


def test_map_index_isolation_and_clear_scope(store: StateStore) -> None:
    for index in (-1, 0, 1):
        store.task(scope(index)).set("job_id", f"j-{index}")
    store.task(scope(0, task_id="other")).set("job_id", "other")
    assert [store.task(scope(i)).get("job_id") for i in (-1, 0, 1)] == ["j--1", "j-0", "j-1"]

    store.task(scope(0)).clear()
    assert store.task(scope(0)).get("job_id") is None
    assert store.task(scope(1)).get("job_id") == "j-1"

    store.task(scope(1)).clear(all_map_indices=True)
    assert [store.task(scope(i)).get("job_id") for i in (-1, 0, 1)] == [None, None, None]
    assert store.task(scope(0, task_id="other")).get("job_id") == "other"


def test_get_set_delete(store: StateStore) -> None:
    job = store.task(scope())
    assert job.get("missing", default="dflt") == "dflt"
    job.set("k", {"nested": [1, 2.5, "x", None, True]})
    job.set("k", [1, 2])  # upsert overwrites
    assert job.get("k") == [1, 2]
    assert job.delete("k") is True
    assert job.delete("k") is False
    assert job.get("k") is None


def test_value_rules(make_store: MakeStore) -> None:
    job = make_store(max_value_storage_bytes=100).task(scope())
    with pytest.raises(ValueError, match="None"):
        job.set("k", None)
    with pytest.raises(TypeError, match="'my_key'"):
        job.set("my_key", {"when": object()})
    with pytest.raises(ValueTooLargeError, match="max_value_storage_bytes=100"):
        job.set("k", "x" * 200)
    assert job.get("k") is None


def test_retention_rules(store: StateStore, clock: FakeClock) -> None:
    job = store.task(scope())
    job.set("week", 1, retention=timedelta(days=7))
    job.set("never", 2, retention=NEVER_EXPIRE)
    job.set("default", 3)
    expiry = {entry.key: entry.expires_at for entry in job.items()}
    assert expiry == {
        "week": clock.now + timedelta(days=7),
        "never": None,
        "default": clock.now + timedelta(days=30),
    }
    with pytest.raises(TypeError):
        job.set("k", 1, retention=7)
    with pytest.raises(ValueError):
        job.set("k", 1, retention=timedelta(seconds=-1))


def test_default_retention_zero_means_never(make_store: MakeStore) -> None:
    job = make_store(default_retention_days=0).task(scope())
    job.set("k", 1)
    assert [entry.expires_at for entry in job.items()] == [None]


def test_negative_default_retention_is_refused(make_store: MakeStore) -> None:
    with pytest.raises(ValueError, match="default_retention_days"):
        make_store(default_retention_days=-1)


def test_expired_rows_are_invisible_before_cleanup(store: StateStore, clock: FakeClock) -> None:
    job = store.task(scope())
    job.set("k", "v", retention=timedelta(hours=1))
    clock.advance(timedelta(hours=1, seconds=1))
    assert job.get("k") is None
    assert job.items() == []
    assert store.stats()["task_state_store"]["expired_not_deleted"] == 1


def _seed_for_cleanup(store: StateStore) -> None:
    for i in range(5):
        store.task(scope(i)).set("expiring", i, retention=timedelta(minutes=5))
    store.task(scope()).set("forever", "keep", retention=NEVER_EXPIRE)
    store.task(scope()).set("later", "keep", retention=timedelta(days=2))
    store.asset(AssetScope(name="orders")).set("watermark", 10)


def _counts(store: StateStore) -> tuple[int, int]:
    with store.engine.connect() as connection:
        tasks = connection.execute(
            sa.select(sa.func.count()).select_from(task_state_store)).scalar_one()
        assets = connection.execute(
            sa.select(sa.func.count()).select_from(asset_state_store)).scalar_one()
    return tasks, assets


def test_cleanup_in_batches(make_store: MakeStore, clock: FakeClock) -> None:
    store = make_store(state_cleanup_batch_size=2)
    _seed_for_cleanup(store)
    clock.advance(timedelta(hours=1))

    dry = store.cleanup(dry_run=True)
    assert (dry.rows, dry.batches, dry.dry_run) == (5, 3, True)
    assert _counts(store) == (7, 1)

    started = time.perf_counter()
    report = store.cleanup()
    elapsed = time.perf_counter() - started
    assert (report.rows, report.batches) == (5, 3)
    assert 0 < report.seconds <= elapsed  # measured on the real clock, in seconds
    assert _counts(store) == (2, 1)  # NEVER_EXPIRE and not-yet-expired rows survive
    assert store.task(scope()).get("forever") == "keep"
    assert store.asset(AssetScope(name="orders")).get("watermark") == 10
    assert store.cleanup().rows == 0


def test_cleanup_in_one_statement(make_store: MakeStore, clock: FakeClock) -> None:
    store = make_store()  # state_cleanup_batch_size = 0
    _seed_for_cleanup(store)
    clock.advance(timedelta(hours=1))
    report = store.cleanup()
    assert (report.rows, report.batches) == (5, 1)
    assert _counts(store) == (2, 1)


def test_mark_task_success(make_store: MakeStore) -> None:
    keeping = make_store()
    keeping.task(scope(0)).set("k", 1)
    assert keeping.mark_task_success(scope(0)) is False
    assert keeping.task(scope(0)).get("k") == 1

    clearing = make_store(clear_on_success=True)
    clearing.task(scope(1)).set("k", 2)
    assert clearing.mark_task_success(scope(0)) is True
    assert clearing.task(scope(0)).get("k") is None
    assert clearing.task(scope(1)).get("k") == 2
