"""Scopes (which namespace a key lives in) and writers (who wrote a row)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

WriterKind = Literal["task", "watcher", "api"]


@dataclass(frozen=True)
class TaskScope:
    """One task try's namespace; each ``map_index`` is its own namespace."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1

    def __post_init__(self) -> None:
        for name in ("dag_id", "run_id", "task_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"TaskScope.{name} must be a non-empty string")
        if isinstance(self.map_index, bool) or not isinstance(self.map_index, int):
            raise TypeError("TaskScope.map_index must be an int")

    def label(self) -> str:
        return f"{self.dag_id}/{self.run_id}/{self.task_id}/{self.map_index}"


@dataclass(frozen=True)
class AssetScope:
    """An asset, named by exactly one of ``name``, ``uri`` or ``asset_id``.

    Only a name can create the asset row on first write; a uri or id must already exist.
    """

    name: str | None = None
    uri: str | None = None
    asset_id: int | None = None

    def __post_init__(self) -> None:
        given = [v for v in (self.name, self.uri, self.asset_id) if v is not None]
        if len(given) != 1:
            raise ValueError("AssetScope needs exactly one of name=, uri= or asset_id=")
        if self.name is not None and not self.name:
            raise ValueError("AssetScope.name must be non-empty")
        if self.uri is not None and not self.uri:
            raise ValueError("AssetScope.uri must be non-empty")

    def label(self) -> str:
        if self.name is not None:
            return self.name
        if self.uri is not None:
            return f"uri={self.uri}"
        return f"id={self.asset_id}"


@dataclass(frozen=True)
class Writer:
    """Who writes asset state: recorded in ``writer_kind``/``writer_id`` of every row."""

    kind: WriterKind
    identity: str

    def __post_init__(self) -> None:
        if self.kind not in ("task", "watcher", "api"):
            raise ValueError(f"writer kind must be task, watcher or api, got {self.kind!r}")

    @classmethod
    def watcher(cls, name: str) -> Writer:
        return cls("watcher", name)

    @classmethod
    def task(cls, scope: TaskScope) -> Writer:
        return cls("task", scope.label())

    @classmethod
    def api(cls, identity: str = "api") -> Writer:
        return cls("api", identity)
