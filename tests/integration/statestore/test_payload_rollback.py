"""Payload backend: a write that does not commit changes nothing a read sees, and leaves
at most the slot it wrote, an orphan no row references; a committed overwrite leaves no
old object (real filesystem payload backend, on SQLite, PostgreSQL and MariaDB)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from statestore_helpers import MakeStore

from sharedstream.statestore import AssetScope, StateStore, TaskScope
from sharedstream.statestore.models import task_state_store

JOB = TaskScope("dag", "run", "task")
ORDERS = AssetScope(name="orders")

# The database refuses a task row whose key is 'refused' (a real failed row write).
REFUSE = {
    "sqlite": [
        f"CREATE TRIGGER refuse_{verb} BEFORE {verb} ON task_state_store "
        "WHEN NEW.key = 'refused' BEGIN SELECT RAISE(ABORT, 'row refused'); END"
        for verb in ("INSERT", "UPDATE")],
    "postgresql": [
        "CREATE FUNCTION refuse_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF NEW.key = 'refused' THEN RAISE EXCEPTION 'row refused'; END IF; "
        "RETURN NEW; END $$",
        "CREATE TRIGGER refuse_row BEFORE INSERT OR UPDATE ON task_state_store "
        "FOR EACH ROW EXECUTE FUNCTION refuse_row()"],
    "mysql": [
        f"CREATE TRIGGER refuse_{verb} BEFORE {verb} ON task_state_store FOR EACH ROW "
        "IF NEW.`key` = 'refused' THEN "
        "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'row refused'; END IF"
        for verb in ("INSERT", "UPDATE")],
}


class Rollback(Exception):
    pass


def _payload_store(make_store: MakeStore, tmp_path: Path) -> tuple[StateStore, Path]:
    root = tmp_path / "payloads"
    return make_store(payload_backend="filesystem", payload_dir=str(root)), root


def _objects(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.glob("*/*.json"))


def _refs(store: StateStore) -> list[str]:
    with store.engine.connect() as connection:
        return sorted(connection.execute(sa.select(task_state_store.c.payload_ref)).scalars())


def _refuse_key(store: StateStore) -> None:
    with store.engine.begin() as connection:
        for statement in REFUSE[connection.dialect.name]:
            connection.exec_driver_sql(statement)


def _apply_then_roll_back(store: StateStore, writes: dict[str, str]) -> None:
    uow = store.unit_of_work()
    job = store.task(JOB).bound(uow)
    for key, value in writes.items():
        job.set(key, value)
    store.asset(ORDERS).bound(uow).set("wm", "new")
    with pytest.raises(Rollback), store.engine.begin() as connection:
        uow.apply(connection)
        raise Rollback
    uow.discard()


def test_rolled_back_unit_keeps_old_values_and_leaves_only_orphans(
    make_store: MakeStore, tmp_path: Path
) -> None:
    """The rolled-back unit wrote the slots its rows do not reference: orphans, listed by
    ``state-store orphans``, which the keys' next writes overwrite."""
    store, root = _payload_store(make_store, tmp_path)
    payload = store.backend.payload  # type: ignore[attr-defined]
    store.task(JOB).set("k", "old")
    store.asset(ORDERS).set("wm", "old")
    before = _objects(root)

    _apply_then_roll_back(store, {"k": "new", "fresh": "new"})

    assert store.task(JOB).get("k") == "old"
    assert store.task(JOB).get("fresh") is None
    assert store.asset(ORDERS).get("wm") == "old"  # asset state stays in the database
    assert _refs(store) == before
    left = sorted([payload.slots(JOB, "k")[1], payload.slots(JOB, "fresh")[0]])
    assert sorted(set(_objects(root)) - set(before)) == left
    assert sorted(o.ref for o in store.orphans(min_age=timedelta(0)).orphans) == left
    store.task(JOB).set("k", "new")
    store.task(JOB).set("fresh", "new")
    assert _objects(root) == _refs(store)


def test_apply_failing_midway_removes_its_objects(
    make_store: MakeStore, tmp_path: Path
) -> None:
    """The unit's task objects are written before its assets are checked: an unknown
    asset id fails the apply, which returns nothing to undo later, so it removes them."""
    store, root = _payload_store(make_store, tmp_path)
    uow = store.unit_of_work()
    store.task(JOB).bound(uow).set("k", "new")
    store.asset(AssetScope(asset_id=424242)).bound(uow).set("wm", 1)
    with pytest.raises(LookupError, match="424242"), store.engine.begin() as connection:
        uow.apply(connection)
    uow.discard()
    assert store.task(JOB).get("k") is None
    assert _objects(root) == []


def test_failed_single_set_keeps_old_value_and_leaves_no_object(
    make_store: MakeStore, tmp_path: Path
) -> None:
    store, root = _payload_store(make_store, tmp_path)
    store.task(JOB).set("refused", "old")
    _refuse_key(store)
    before = _objects(root)

    with pytest.raises(sa.exc.DatabaseError, match="row refused"):
        store.task(JOB).set("refused", "new")
    with pytest.raises(sa.exc.DatabaseError, match="row refused"):
        store.task(TaskScope("dag", "run", "other")).set("refused", "new")

    assert store.task(JOB).get("refused") == "old"
    assert _objects(root) == before == _refs(store)


def test_overwrite_leaves_only_the_live_object(make_store: MakeStore, tmp_path: Path) -> None:
    store, root = _payload_store(make_store, tmp_path)
    job = store.task(JOB)
    job.set("k", 1)
    first = _refs(store)
    job.set("k", 2)
    with store.unit_of_work() as uow:
        store.task(JOB).bound(uow).set("k", 3)
    assert job.get("k") == 3
    assert _objects(root) == _refs(store) == first  # back on slot 0, via slot 1
    with store.unit_of_work() as uow:  # deleted then set again in one unit
        bound = store.task(JOB).bound(uow)
        bound.delete("k")
        bound.set("k", 4)
    assert job.get("k") == 4
    assert _objects(root) == _refs(store)
    assert job.delete("k") is True
    assert _objects(root) == []


def test_reapplied_unit_undoes_the_first_attempt(make_store: MakeStore, tmp_path: Path) -> None:
    """A writer that retries its transaction applies the unit again (the first attempt
    rolled back): the second attempt writes the same slot, and only its object stays."""
    store, root = _payload_store(make_store, tmp_path)
    uow = store.unit_of_work()
    store.task(JOB).bound(uow).set("k", "v")
    with pytest.raises(Rollback), store.engine.begin() as connection:
        uow.apply(connection)
        raise Rollback
    with store.engine.begin() as connection:
        uow.apply(connection)
    uow.committed()
    assert store.task(JOB).get("k") == "v"
    assert _objects(root) == _refs(store)
    assert len(_refs(store)) == 1


def test_row_of_an_older_version_reads_and_its_object_goes_on_overwrite(
    make_store: MakeStore, tmp_path: Path
) -> None:
    """Rows written by older versions point at the key's plain reference, slot 0."""
    store, root = _payload_store(make_store, tmp_path)
    payload = store.backend.payload  # type: ignore[attr-defined]
    legacy = payload.reference(JOB, "k")
    payload.write(legacy, '"old"')
    with store.engine.begin() as connection:
        connection.execute(sa.insert(task_state_store).values(
            dag_id=JOB.dag_id, run_id=JOB.run_id, task_id=JOB.task_id, map_index=-1,
            key="k", value=None, payload_ref=legacy, updated_at=store.backend.clock(),
            expires_at=None))
    assert store.task(JOB).get("k") == "old"
    store.task(JOB).set("k", "new")
    assert store.task(JOB).get("k") == "new"
    assert legacy not in _objects(root)
    assert _objects(root) == _refs(store)


def test_read_of_a_superseded_reference_reads_the_row_again(
    make_store: MakeStore, tmp_path: Path
) -> None:
    """A reader that read the row just before a writer moved it to the other slot (and
    removed the old one) reads the row again instead of failing."""
    store, _ = _payload_store(make_store, tmp_path)
    store.task(JOB).set("k", "old")
    [stale] = _refs(store)
    store.task(JOB).set("k", "new")
    backend = store.backend
    assert backend.payload_text(JOB, "k", stale) == '"new"'  # type: ignore[attr-defined]
    store.task(JOB).delete("k")
    assert backend.payload_text(JOB, "k", stale) is None  # type: ignore[attr-defined]
