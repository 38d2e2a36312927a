"""Backends: filesystem payloads (round trip, orphans), custom storage by dotted path."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from statestore_helpers import FakeClock, MakeStore

from sharedstream.statestore import (
    AssetScope,
    StateBackend,
    StateEntry,
    StateStore,
    StateStoreSettings,
    TaskScope,
    Writer,
)
from sharedstream.statestore.models import task_state_store
from sharedstream.statestore.staging import MISSING

JOB = TaskScope("dag", "run", "task", 2)


def test_filesystem_round_trip(make_store: MakeStore, tmp_path: Path) -> None:
    root = tmp_path / "payloads"
    store = make_store(payload_backend="filesystem", payload_dir=str(root))
    job = store.task(JOB)
    job.set("big", {"rows": list(range(100))})
    ref, other = store.backend.payload.slots(JOB, "big")  # type: ignore[attr-defined]
    assert ref == store.backend.payload.reference(JOB, "big")  # type: ignore[attr-defined]
    with store.engine.connect() as connection:
        row = connection.execute(
            sa.select(task_state_store.c.value, task_state_store.c.payload_ref)
        ).one()
    assert (row.value, row.payload_ref) == (None, ref)  # deterministic per scope + key
    assert (root / ref).is_file()
    assert job.get("big") == {"rows": list(range(100))}
    job.set("big", "smaller")
    assert job.get("big") == "smaller"
    assert not (root / ref).exists() and (root / other).is_file()  # the other slot
    assert job.delete("big") is True
    assert list(root.glob("*/*.json")) == []
    assert store.orphans(min_age=timedelta(0)).orphans == []


def test_orphan_after_failed_delete(
    make_store: MakeStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "payloads"
    store = make_store(payload_backend="filesystem", payload_dir=str(root))
    job = store.task(JOB)
    job.set("k", "v")
    with store.engine.connect() as connection:
        orphan_ref = connection.execute(sa.select(task_state_store.c.payload_ref)).scalar_one()
    job.set("kept", "v")
    payload = store.backend.payload  # type: ignore[attr-defined]

    def crash(ref: str) -> None:
        raise OSError("simulated crash between row delete and object delete")

    monkeypatch.setattr(payload, "delete", crash)
    with pytest.raises(OSError, match="simulated crash"):
        job.delete("k")
    monkeypatch.undo()
    assert job.get("k") is None  # the reference went first
    assert (root / orphan_ref).is_file()

    assert store.orphans(min_age=timedelta(hours=1)).orphans == []  # too young to judge
    listed = store.orphans(min_age=timedelta(0))
    assert [o.ref for o in listed.orphans] == [orphan_ref]
    assert listed.deleted == 0
    removed = store.orphans(delete=True, min_age=timedelta(0))
    assert removed.deleted == 1
    assert not (root / orphan_ref).exists()
    assert job.get("kept") == "v"


def test_filesystem_cleanup_removes_objects(
    make_store: MakeStore, tmp_path: Path, clock: FakeClock
) -> None:
    root = tmp_path / "payloads"
    store = make_store(
        payload_backend="filesystem", payload_dir=str(root), state_cleanup_batch_size=1
    )
    store.task(JOB).set("old", 1, retention=timedelta(minutes=1))
    store.task(JOB).set("new", 2, retention=timedelta(days=1))
    clock.advance(timedelta(hours=1))
    assert store.cleanup().rows == 1
    assert len(list(root.glob("*/*.json"))) == 1
    assert store.task(JOB).get("new") == 2


def test_unit_of_work_with_payloads(make_store: MakeStore, tmp_path: Path) -> None:
    store = make_store(payload_backend="filesystem", payload_dir=str(tmp_path / "p"))
    store.task(JOB).set("gone", 1)
    with store.unit_of_work() as uow:
        job = store.task(JOB).bound(uow)
        job.delete("gone")
        job.set("k", {"a": 1})
    assert store.task(JOB).get("k") == {"a": 1}
    assert store.task(JOB).get("gone") is None
    assert store.orphans(min_age=timedelta(0)).orphans == []


class MemoryBackend(StateBackend):
    """A custom storage: plain dicts (what a user's Redis backend would look like)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tasks: dict[tuple[TaskScope, str], Any] = {}
        self.assets: dict[tuple[AssetScope, str], Any] = {}

    def task_get(self, scope: TaskScope, key: str) -> Any:
        return self.tasks.get((scope, key), MISSING)

    def task_set(self, scope: TaskScope, key: str, value: Any, text: str, expires_at: Any) -> None:
        self.tasks[(scope, key)] = value

    def task_delete(self, scope: TaskScope, key: str) -> bool:
        return self.tasks.pop((scope, key), MISSING) is not MISSING

    def task_clear(self, scope: TaskScope, all_map_indices: bool) -> int:
        doomed = [k for k in self.tasks if k[0] == scope]
        for k in doomed:
            del self.tasks[k]
        return len(doomed)

    def task_items(self, scope: TaskScope) -> list[StateEntry]:
        return []

    def asset_get(self, scope: AssetScope, key: str) -> Any:
        return self.assets.get((scope, key), MISSING)

    def asset_set(self, scope: AssetScope, key: str, value: Any, text: str, writer: Writer) -> None:
        self.assets[(scope, key)] = value

    def asset_delete(self, scope: AssetScope, key: str) -> bool:
        return self.assets.pop((scope, key), MISSING) is not MISSING

    def asset_clear(self, scope: AssetScope) -> int:
        return 0

    def asset_items(self, scope: AssetScope) -> list[StateEntry]:
        return []

    def asset_advance(
        self, scope: AssetScope, key: str, value: Any, text: str, writer: Writer
    ) -> bool:
        current = self.assets.get((scope, key), MISSING)
        if current is not MISSING and value <= current:
            return False
        self.assets[(scope, key)] = value
        return True


def test_custom_backend_by_dotted_path(make_store: MakeStore) -> None:
    store = make_store(backend=f"{__name__}.MemoryBackend")
    assert isinstance(store.backend, MemoryBackend)
    store.task(JOB).set("k", 1)
    assert store.task(JOB).get("k") == 1
    with store.unit_of_work() as uow:
        assert store.asset(AssetScope(name="a")).bound(uow).advance("wm", 3) is True
    assert store.asset(AssetScope(name="a")).get("wm") == 3
    report = store.cleanup()
    assert report.skipped is not None and "skipped" in report.skipped
    assert (report.rows, report.batches) == (0, 0)


def test_backend_option_errors(db_url: str) -> None:
    with pytest.raises(ValueError, match="empty"):
        StateStoreSettings(backend="")
    with pytest.raises(TypeError, match="not a subclass"):
        StateStore.from_url(db_url, StateStoreSettings(backend="collections.OrderedDict"))
    with pytest.raises(ValueError, match="cannot import"):
        StateStore.from_url(db_url, StateStoreSettings(backend="no_such_module.Backend"))
    with pytest.raises(TypeError, match="not a subclass"):
        StateStore.from_url(db_url, StateStoreSettings(payload_backend="pathlib.Path"))
