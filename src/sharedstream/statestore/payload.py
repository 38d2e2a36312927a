"""Payload backends (``[workers] state_backend``): task values outside the database.

The database row keeps only a reference; the reference is a pure function of scope and
key, so rewriting a key overwrites its object instead of leaking a new one.

Write order and failure windows (the filesystem has no transaction with the database):
- set writes the object first, then the row: a crash in between leaves an unreferenced
  object (an orphan, listed by ``state-store orphans``), never a row without its object.
- delete removes the row first, then the object: a crash in between leaves an orphan.
- Overwriting a key replaces the object in place before the row commits; a reader between
  the two sees the new value under the old row (same key, so no other key is affected).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sharedstream.statestore.scopes import TaskScope
from sharedstream.statestore.settings import StateStoreSettings


@dataclass(frozen=True)
class StoredObject:
    ref: str
    size: int
    modified_at: datetime


class PayloadBackend(ABC):
    """Where task-state payloads live when ``[workers] state_backend`` is set.

    Subclasses are constructed as ``cls(settings)``.
    """

    def __init__(self, settings: StateStoreSettings) -> None:
        self.settings = settings

    @abstractmethod
    def reference(self, scope: TaskScope, key: str) -> str:
        """The deterministic reference of ``scope`` + ``key``."""

    @abstractmethod
    def write(self, ref: str, text: str) -> None:
        """Store ``text`` under ``ref`` atomically (readers see old or new, never half)."""

    @abstractmethod
    def read(self, ref: str) -> str:
        """Return the text under ``ref``; raise FileNotFoundError when it is missing."""

    @abstractmethod
    def delete(self, ref: str) -> None:
        """Remove ``ref``; a missing object is not an error (delete is retried after crashes)."""

    @abstractmethod
    def list_objects(self) -> Iterator[StoredObject]:
        """Every stored object, for orphan detection."""


class FilesystemPayloadBackend(PayloadBackend):
    """Payloads as files under ``[workers] state_dir`` (default ``./sharedstream-state``)."""

    def __init__(self, settings: StateStoreSettings) -> None:
        super().__init__(settings)
        self.root = settings.resolved_payload_dir()

    def reference(self, scope: TaskScope, key: str) -> str:
        identity = json.dumps([scope.dag_id, scope.run_id, scope.task_id, scope.map_index, key])
        digest = hashlib.sha256(identity.encode("utf-8")).hexdigest()
        return f"{digest[:2]}/{digest}.json"

    def _path(self, ref: str) -> Path:
        path = (self.root / ref).resolve()
        if self.root.resolve() not in path.parents:
            raise ValueError(f"payload reference {ref!r} escapes {self.root}")
        return path

    def write(self, ref: str, text: str) -> None:
        path = self._path(ref)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".part")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def read(self, ref: str) -> str:
        return self._path(ref).read_text(encoding="utf-8")

    def delete(self, ref: str) -> None:
        self._path(ref).unlink(missing_ok=True)

    def list_objects(self) -> Iterator[StoredObject]:
        if not self.root.exists():
            return
        for path in sorted(self.root.glob("*/*.json")):
            stat = path.stat()
            yield StoredObject(
                ref=path.relative_to(self.root).as_posix(),
                size=stat.st_size,
                modified_at=datetime.fromtimestamp(stat.st_mtime, UTC),
            )
