"""A unit's advances applied in bulk: one locked read for every key, one batched swap.

The bulk path must keep ``advance``'s compare-and-swap: per key the larger value wins,
whether the competing write landed before the unit's read, between its read and its
swap, or raced it from another thread all along.
"""

from __future__ import annotations

import random
import threading
from typing import Any

import sqlalchemy as sa
from statestore_helpers import MakeStore

from sharedstream.statestore import AssetScope, StateStore, Writer

ORDERS = AssetScope(name="orders")
PAYMENTS = AssetScope(name="payments")
KEYS = [f"wm/{i}" for i in range(8)]


def test_several_keys_and_assets_in_one_unit(store: StateStore) -> None:
    orders, payments = store.asset(ORDERS), store.asset(PAYMENTS)
    for i, key in enumerate(KEYS[:4]):
        orders.set(key, 10 * i)
    payments.set("wm/0", 5)
    uow = store.unit_of_work()
    staged_orders = store.asset(ORDERS, writer=Writer.watcher("w")).bound(uow)
    staged_payments = store.asset(PAYMENTS, writer=Writer.watcher("w")).bound(uow)
    for i, key in enumerate(KEYS):
        assert staged_orders.advance(key, 10 * i + 1) is True  # 4 existing, 4 absent
    assert staged_payments.advance("wm/0", 6) is True
    # Another writer overtakes two of the existing keys before the unit commits.
    orders.advance(KEYS[1], 100)
    orders.advance(KEYS[3], 100)
    uow.commit()
    assert [orders.get(key) for key in KEYS] == [1, 100, 21, 100, 41, 51, 61, 71]
    assert payments.get("wm/0") == 6


def test_write_between_read_and_swap_is_not_lost(make_store: MakeStore) -> None:
    """A competing advance to a value below the unit's commits right after the unit read
    the rows (possible where the read takes no row lock, as on SQLite): the swap of that
    key misses, the key is redone one at a time, and the unit's larger value still wins."""
    store = make_store()
    other = make_store()
    direct = other.asset(ORDERS)
    for key in KEYS:
        direct.set(key, 0)
    uow = store.unit_of_work()
    staged = store.asset(ORDERS, writer=Writer.watcher("w")).bound(uow)
    for i, key in enumerate(KEYS):
        staged.advance(key, i + 1)
    if store.engine.dialect.name in ("postgresql", "mysql"):
        # The unit's rows are locked from its read to its commit (SELECT ... FOR UPDATE):
        # the competing writer waits, then finds the unit's 3 and stays behind.
        competitor = threading.Thread(target=lambda: direct.advance(KEYS[2], 2))
        with store.engine.begin() as connection:
            uow.apply(connection)
            competitor.start()
            competitor.join(0.5)
            assert competitor.is_alive(), "the competing write passed a row lock"
        competitor.join()
        uow.committed()
    else:
        fired = False

        def compete(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            nonlocal fired
            if not fired and statement.lstrip().upper().startswith("UPDATE ASSET_STATE_STORE"):
                fired = True
                direct.advance(KEYS[2], 2)  # 0 -> 2 between the unit's read and swap

        sa.event.listen(store.engine, "before_cursor_execute", compete)
        try:
            uow.commit()
        finally:
            sa.event.remove(store.engine, "before_cursor_execute", compete)
        assert fired
    assert [direct.get(key) for key in KEYS] == [i + 1 for i in range(len(KEYS))]


def test_units_raced_by_direct_writers(make_store: MakeStore) -> None:
    """Units advancing all keys at once against threads advancing single keys: every key
    ends at the largest value anyone tried, and no reader ever sees it go back."""
    rounds = 60
    stores = [make_store() for _ in range(3)]
    problems: list[str] = []
    tried: dict[str, list[int]] = {key: [] for key in KEYS}
    lock = threading.Lock()

    def units(store: StateStore, seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(rounds):
            uow = store.unit_of_work()
            staged = store.asset(ORDERS, writer=Writer.watcher("w")).bound(uow)
            for key in KEYS:
                value = rng.randrange(1000)
                with lock:
                    tried[key].append(value)
                staged.advance(key, value)
            uow.commit()

    def direct(store: StateStore, seed: int) -> None:
        rng = random.Random(seed)
        state = store.asset(ORDERS, writer=Writer.api())
        seen: dict[str, int] = {}
        for _ in range(rounds * 2):
            key = rng.choice(KEYS)
            value = rng.randrange(1000)
            with lock:
                tried[key].append(value)
            state.advance(key, value)
            now = state.get(key)
            if now < seen.get(key, -1):
                problems.append(f"{key} went back from {seen[key]} to {now}")
            seen[key] = now

    threads = [threading.Thread(target=units, args=(stores[0], 1)),
               threading.Thread(target=units, args=(stores[1], 2)),
               threading.Thread(target=direct, args=(stores[2], 3))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert problems == []
    state = stores[0].asset(ORDERS)
    assert {key: state.get(key) for key in KEYS} == {key: max(v) for key, v in tried.items()}
