"""Folding the staged state writes of many windows into one, in window order.

A batch commits many windows in one transaction. Applying each window's unit on its
own would cost a few statements per window (asset lookup, locked read, update) and
make the batch as slow as committing windows one by one. Instead their staged writes
are folded, oldest window first, into a single :class:`StagedWrites` whose apply has
exactly the effect of applying them in sequence:

* a later set or delete of a key replaces the earlier operation;
* a clear drops every earlier operation of that asset and is applied first;
* an advance over an earlier set becomes a set of the larger of the two (sequentially
  the advance would be re-checked against the set value); over a delete, or over a
  cleared asset, it becomes a set (an absent key always accepts an advance); over an
  earlier advance it keeps the further of the two, still conditional, so the apply
  re-checks it against the database (another writer may have moved the key meanwhile).

Only asset state is folded: windows are staged by ``WatcherStateAccess``, which writes
nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable

from sharedstream.statestore.comparison import is_forward
from sharedstream.statestore.staging import (
    AssetStaging,
    StagedAdvance,
    StagedOp,
    StagedSet,
    StagedWrites,
)


def fold_staged(units: Iterable[StagedWrites]) -> StagedWrites:
    """One ``StagedWrites`` equivalent to applying ``units`` one after the other."""
    merged = StagedWrites()
    for unit in units:
        if unit.tasks or unit.cleared_task_groups:
            raise ValueError("a watcher's unit of work holds task state; only asset state "
                             "can be folded into a batch")
        for scope, staging in unit.assets.items():
            _fold_asset(merged.asset(scope), staging)
    return merged


def _fold_asset(into: AssetStaging, later: AssetStaging) -> None:
    if later.cleared:
        into.cleared = True
        into.ops.clear()
    for key, op in later.ops.items():
        into.ops[key] = _then(into.ops.get(key), op, into.cleared)


def _then(earlier: StagedOp | None, op: StagedOp, cleared: bool) -> StagedOp:
    """The single operation equal to ``earlier`` followed by ``op``."""
    if not isinstance(op, StagedAdvance):
        return op
    if isinstance(earlier, StagedSet):
        if is_forward(op.value, earlier.value):
            return StagedSet(op.value, op.text, op.writer)
        return earlier
    if isinstance(earlier, StagedAdvance):
        return op if is_forward(op.value, earlier.value) else earlier
    if earlier is None and not cleared:
        return op
    return StagedSet(op.value, op.text, op.writer)  # over a delete or a clear: key absent
