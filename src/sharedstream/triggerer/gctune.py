"""Garbage-collector settings for a process that runs shared streams.

Why: every message in flight is a handful of GC-tracked objects (the
message, its payload, the ledger's entry, a window, its events) that live for
thousands of allocations, so with the default thresholds (700, 10, 10) they are
promoted to the old generations and force frequent full collections, each of
which also walks every object created at start-up (modules, classes, config).
Timed with ``gc.callbacks`` in ``bench/kafka_throughput.py`` (1 watcher, 200,000
messages), collections took ~3.2 s of a ~7.4 s run; py-spy charged that time to
whichever line allocated. Freezing the start-up objects takes them out of every
collection, and larger thresholds collect the short-lived churn less often: the
same run went from 17-27k to 37-45k messages/s.

Cycles among objects that existed when :func:`tune_gc` ran are never collected
(they are start-up state that lives for the process anyway); reference counting
still frees everything else at once, so memory between collections grows only by
the cyclic garbage of one young generation.

Start-up itself (``sharedstream run``) runs with collections off
(:func:`pause_collections`, ended by :func:`tune_gc`): the imports, the watcher modules
and the registration allocate some 100,000 objects that nearly all live, so each
collection of the default thresholds walked them for nothing (~130 of them; 40 ms of the
~350 ms of imports measured). What start-up leaves as cyclic garbage is frozen with the
rest, not collected: one ``gc.collect()`` there walked every start-up object to find
593 garbage objects among 84,000 at 1,000 bench watchers (40 ms), and 2,105 among
300,000 at 10,000 (102 ms), a tenth of a second of start-up for a few hundred kilobytes
kept. A start-up that fails exits the process.
"""

from __future__ import annotations

import gc

# Young-generation allocations between collections, and the number of collections
# of one generation before the next is examined (the default is 700, 10, 10).
THRESHOLDS = (50_000, 20, 100)


_paused = False  # collections are off until tune_gc (pause_collections)


def pause_collections() -> None:
    """No automatic collections until :func:`tune_gc` or :func:`resume_collections`
    (the start of ``sharedstream run``: see the module docstring)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume_collections() -> None:
    """Collections paused by :func:`pause_collections` run again (no-op otherwise: a
    start-up that failed before :func:`tune_gc`, in a process that goes on)."""
    global _paused
    if _paused:
        _paused = False
        gc.enable()


def tune_gc() -> None:
    """Freeze what exists now and raise the collection thresholds (call once, after
    start-up, before the event loop runs the watchers); collections paused by
    :func:`pause_collections` run again."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    resume_collections()


__all__ = ["THRESHOLDS", "pause_collections", "resume_collections", "tune_gc"]
