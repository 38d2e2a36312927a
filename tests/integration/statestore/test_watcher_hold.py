"""``watcher_hold`` on each database: holds written in a transaction, read and pruned on
assignment (statestore/holds.py; the crash tests are tests/e2e/test_holds_*.py)."""

from __future__ import annotations

from sharedstream.core.holds import HoldKey, Taken
from sharedstream.statestore import StateStore
from sharedstream.statestore.holds import load_holds, write_holds

GROUPS = {"a": "g1", "b": "g1", "c": "g2"}


def test_holds_round_trip_and_rows_below_the_commit_go(store: StateStore) -> None:
    record = (HoldKey("a", "orders", 0, 5), HoldKey("b", "orders", 0, 5),
              HoldKey("a", "orders", 0, 9), HoldKey("a", "orders", 1, 2),
              HoldKey("c", "orders", 0, 3))
    with store.engine.begin() as connection:
        write_holds(connection, Taken(record, ()), GROUPS)
    with store.engine.begin() as connection:  # written again: no duplicate key error
        write_holds(connection, Taken(record[:1], (HoldKey("a", "orders", 0, 9),)), GROUPS)
    with store.engine.begin() as connection:
        found = load_holds(connection, "g1", [("orders", 0, 5), ("orders", 1, None)])
    assert found == {("orders", 0): {5: frozenset({"a", "b"})},
                     ("orders", 1): {2: frozenset({"a"})}}
    with store.engine.begin() as connection:  # the commit moved past 5: those rows go
        assert load_holds(connection, "g1", [("orders", 0, 6)]) == {}
        # another consumer group's rows on the same topic are neither read nor pruned
        assert load_holds(connection, "g2", [("orders", 0, 0)]) == {
            ("orders", 0): {3: frozenset({"c"})}}
