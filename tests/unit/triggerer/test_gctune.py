"""tune_gc: start-up objects frozen out of collections, higher thresholds."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from sharedstream.triggerer.gctune import THRESHOLDS, pause_collections, tune_gc


@pytest.fixture
def restore_gc() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)
    gc.enable()


class Node:
    other: object = None


def garbage_cycle() -> weakref.ref[Node]:
    """A reference to one of two objects that only refer to each other (cyclic garbage,
    which only a collection frees)."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.mark.usefixtures("restore_gc")
def test_freezes_startup_objects_and_raises_thresholds() -> None:
    startup = object.__new__(type("Startup", (), {}))  # a tracked object that exists now
    tune_gc()
    assert gc.get_threshold() == THRESHOLDS
    assert gc.get_freeze_count() > 0
    # Frozen: in the permanent generation, which no collection walks.
    assert not any(o is startup for g in range(3) for o in gc.get_objects(generation=g))


@pytest.mark.usefixtures("restore_gc")
def test_later_garbage_cycles_are_collected_without_anyone_asking() -> None:
    """A cycle made after tuning is freed by an automatic collection once the young
    generation fills (no ``gc.collect()`` here: that would pass with collection off)."""
    tune_gc()

    freed = garbage_cycle()
    survivors = []
    for _ in range(2 * THRESHOLDS[0]):  # tracked allocations that stay alive
        survivors.append([])
        if freed() is None:
            break
    assert freed() is None, "no automatic collection after twice the young threshold"


@pytest.mark.usefixtures("restore_gc")
def test_start_up_runs_without_collections_until_tuned() -> None:
    """``run`` pauses collections first; tuning after start-up turns them on again.
    Start-up's own cyclic garbage is frozen with everything else, not collected (a
    collection there walked every start-up object for a few hundred garbage ones)."""
    pause_collections()
    assert not gc.isenabled()

    freed = garbage_cycle()
    survivors = [[] for _ in range(10 * 700)]  # past the default young threshold
    assert freed() is not None, "collected while start-up had collections paused"
    del survivors
    tune_gc()
    assert gc.isenabled() and freed() is not None
    assert not any(o is freed() for g in range(3) for o in gc.get_objects(generation=g))
