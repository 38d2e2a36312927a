"""The staging buffer of a unit of work: state writes waiting for the caller's transaction.

Writes made through a bound accessor land here, keyed by scope and key, last write wins
(composed where needed, see ``AssetStaging.stage_advance``). Bound reads consult the buffer
first (read-your-writes). Nothing reaches the database until the unit is applied inside a
transaction, so a unit that is rolled back or abandoned leaves no trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sharedstream.statestore.scopes import AssetScope, TaskScope, Writer


@dataclass(frozen=True)
class StagedSet:
    value: Any
    text: str
    writer: Writer | None = None
    expires_at: datetime | None = None


@dataclass(frozen=True)
class StagedAdvance:
    """Re-checked against the committed value at apply time: an advance that another writer
    has overtaken meanwhile is dropped, so a watermark never moves backwards."""

    value: Any
    text: str
    writer: Writer


@dataclass(frozen=True)
class StagedDelete:
    pass


StagedOp = StagedSet | StagedAdvance | StagedDelete

# What a read of a staged key sees: a value, or MISSING for a staged delete/clear.
MISSING: Any = object()
NOT_STAGED: Any = object()


@dataclass
class AssetStaging:
    cleared: bool = False
    ops: dict[str, StagedOp] = field(default_factory=dict)

    def lookup(self, key: str) -> Any:
        op = self.ops.get(key)
        if op is None:
            return MISSING if self.cleared else NOT_STAGED
        return MISSING if isinstance(op, StagedDelete) else op.value

    def stage_advance(self, key: str, value: Any, text: str, writer: Writer) -> None:
        """Stage an advance the caller has already checked against the visible value.

        Over a staged set or delete it becomes a set (the earlier write was unconditional,
        so the later one is too); over a staged advance or nothing it stays conditional.
        """
        previous = self.ops.get(key)
        if self.cleared if previous is None else not isinstance(previous, StagedAdvance):
            self.ops[key] = StagedSet(value, text, writer)
        else:
            self.ops[key] = StagedAdvance(value, text, writer)


@dataclass
class TaskStaging:
    cleared: bool = False
    ops: dict[str, StagedSet | StagedDelete] = field(default_factory=dict)

    def lookup(self, key: str) -> Any:
        op = self.ops.get(key)
        if isinstance(op, StagedSet):
            return op.value
        if isinstance(op, StagedDelete) or self.cleared:
            return MISSING
        return NOT_STAGED


@dataclass
class StagedWrites:
    """Everything a unit of work will write, grouped so apply needs few statements."""

    assets: dict[AssetScope, AssetStaging] = field(default_factory=dict)
    tasks: dict[TaskScope, TaskStaging] = field(default_factory=dict)
    # (dag_id, run_id, task_id) whose every map index is cleared before the per-scope ops.
    cleared_task_groups: set[tuple[str, str, str]] = field(default_factory=set)

    def asset(self, scope: AssetScope) -> AssetStaging:
        staging = self.assets.get(scope)
        if staging is None:  # not setdefault: that builds an AssetStaging every call
            staging = self.assets[scope] = AssetStaging()
        return staging

    def task(self, scope: TaskScope) -> TaskStaging:
        staging = self.tasks.get(scope)
        if staging is None:
            group = (scope.dag_id, scope.run_id, scope.task_id)
            staging = TaskStaging(cleared=group in self.cleared_task_groups)
            self.tasks[scope] = staging
        return staging

    def clear_task_group(self, scope: TaskScope) -> None:
        group = (scope.dag_id, scope.run_id, scope.task_id)
        self.cleared_task_groups.add(group)
        for other, staging in self.tasks.items():
            if (other.dag_id, other.run_id, other.task_id) == group:
                staging.cleared = True
                staging.ops.clear()

    def __bool__(self) -> bool:
        """True when anything is staged; cheaper than ``len`` (asked twice per window)."""
        for asset in self.assets.values():
            if asset.ops or asset.cleared:
                return True
        for task in self.tasks.values():
            if task.ops or task.cleared:
                return True
        return bool(self.cleared_task_groups)

    def __len__(self) -> int:
        return (
            sum(len(s.ops) + s.cleared for s in self.assets.values())
            + sum(len(s.ops) + s.cleared for s in self.tasks.values())
            + len(self.cleared_task_groups)
        )
