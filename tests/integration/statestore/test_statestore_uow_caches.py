"""Units of work remember asset ids and their last watermark rows across commits (issue
28): neither memory may let a write land on a deleted asset or move a key backwards.

The triggerer names its assets by id (``AssetScope(asset_id=...)``) and advances the same
keys batch after batch; a unit of work then skips the asset id check and the locked read
of keys it wrote last, guarding its update by the row's version and value instead. These
tests change the rows behind the memory's back, on SQLite, PostgreSQL and MariaDB.
"""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from statestore_helpers import MakeStore

from sharedstream.statestore import AssetScope, StateStore, Writer

WATCHER = Writer.watcher("w")


def _advance(store: StateStore, scope: AssetScope, key: str, value: object) -> None:
    uow = store.unit_of_work()
    assert store.asset(scope, writer=WATCHER).bound(uow).advance(key, value) is True
    uow.commit()


def test_deleted_asset_is_no_asset_after_remembered_commits(store: StateStore) -> None:
    """Today's behaviour, kept: a state write of a deleted asset fails with "no asset"
    (a LookupError, which the writer holds and retries), never a constraint error (which
    it would dead-letter), however many commits of that asset came before."""
    scope = AssetScope(asset_id=store.register_asset("orders"))
    _advance(store, scope, "wm", 1)
    _advance(store, scope, "wm", 2)  # the second unit runs on the remembered id and row
    assert store.delete_asset("orders") is True
    for write in ("advance", "set"):
        uow = store.unit_of_work()
        state = store.asset(scope, writer=WATCHER).bound(uow)
        if write == "advance":
            state.advance("wm", 3)
        else:
            state.set("note", "x")
        with pytest.raises(LookupError, match=f"no asset id={scope.asset_id}"):
            uow.commit()


@pytest.mark.parametrize("seed, first, theirs, ours, later", [
    (0, 5, 100, 6, 101),          # another writer set the key further: the version differs
    (0, 5, 50, 6, 51),            # deleted and written twice: version 2 again, another value
    ("A", "B", "b", "C", "c"),    # the same, with values a case-insensitive collation equates
])
def test_remembered_watermark_never_moves_backwards(
    store: StateStore, seed: object, first: object, theirs: object, ours: object,
    later: object,
) -> None:
    scope = AssetScope(asset_id=store.register_asset("orders"))
    other = store.asset(scope)
    other.set("wm", seed)  # version 1
    _advance(store, scope, "wm", first)  # remembered: version 2, value ``first``
    uow = store.unit_of_work()
    assert store.asset(scope, writer=WATCHER).bound(uow).advance("wm", ours) is True
    if theirs == 100:
        other.set("wm", theirs)  # version 3
    else:
        other.delete("wm")
        other.set("wm", seed)
        other.set("wm", theirs)  # version 2 again
    uow.commit()  # the staged advance was forward of ``first``, not of ``theirs``
    assert other.get("wm") == theirs
    _advance(store, scope, "wm", later)  # and the unit's memory follows the row again
    assert other.get("wm") == later


def test_remembered_keys_take_one_statement(store: StateStore) -> None:
    """The steady state the memory is for: a unit advancing keys its backend wrote last
    runs one statement on the state table, the guarded UPDATE (no count, no locked read,
    no asset id check)."""
    scope = AssetScope(asset_id=store.register_asset("orders"))
    for value in (1, 2):  # insert, then the locked path, which remembers the rows
        uow = store.unit_of_work()
        state = store.asset(scope, writer=WATCHER).bound(uow)
        assert state.advance("a", value) and state.advance("b", value)
        uow.commit()
    uow = store.unit_of_work()
    state = store.asset(scope, writer=WATCHER).bound(uow)
    assert state.advance("a", 3) and state.advance("b", 3)
    statements: list[str] = []

    def seen(conn: object, cursor: object, statement: str, *args: object) -> None:
        statements.append(" ".join(statement.split()[:2]))

    sa.event.listen(store.engine, "before_cursor_execute", seen)
    try:
        uow.commit()
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", seen)
    assert [s for s in statements if s.split()[0] in ("SELECT", "UPDATE", "INSERT")] == [
        "UPDATE asset_state_store"]
    assert (store.asset(scope).get("a"), store.asset(scope).get("b")) == (3, 3)


def test_remembered_watermarks_raced_by_another_store(make_store: MakeStore) -> None:
    """Two stores (two processes' backends, each with its own memory) advance the same
    keys with rising values, mostly on the one-UPDATE path, while a third writes some
    keys directly: no key ever reads lower than a value its writer committed or than it
    read before, and every key ends at the largest value tried."""
    stores = [make_store() for _ in range(3)]
    scope = AssetScope(asset_id=stores[0].register_asset("orders"))
    keys = [f"wm/{i}" for i in range(4)]
    problems: list[str] = []

    def units(store: StateStore, start: int) -> None:
        for value in range(start, start + 120, 2):
            uow = store.unit_of_work()
            staged = store.asset(scope, writer=WATCHER).bound(uow)
            for key in keys:
                staged.advance(key, value)
            uow.commit()
            now = [store.asset(scope).get(key) for key in keys]
            if min(now) < value:
                problems.append(f"after committing {value}: {now}")

    def direct(store: StateStore) -> None:
        state = store.asset(scope, writer=Writer.api())
        for value in range(0, 121, 3):
            state.advance(keys[value % len(keys)], value)

    def reader(store: StateStore) -> None:
        state = store.asset(scope)
        last = {key: -1 for key in keys}
        while not done.is_set():
            for key in keys:
                now = state.get(key, -1)
                if now < last[key]:
                    problems.append(f"{key} went back from {last[key]} to {now}")
                last[key] = now

    done = threading.Event()
    threads = [threading.Thread(target=units, args=(stores[0], 0)),
               threading.Thread(target=units, args=(stores[1], 1)),
               threading.Thread(target=direct, args=(stores[2],))]
    watching = threading.Thread(target=reader, args=(make_store(),))
    watching.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    watching.join()
    assert problems == []
    assert {key: stores[0].asset(scope).get(key) for key in keys} == {
        key: 120 if key == keys[0] else 119 for key in keys}
