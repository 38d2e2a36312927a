"""Payload backends (``[workers] state_backend``): task values outside the database.

The database row keeps only a reference. Every write stores its value under a reference of
its own, the key's stem (:meth:`PayloadBackend.reference`, a pure function of scope and
key) plus a per-write suffix, and the row is pointed at it in the writing transaction: a
live object is never overwritten in place, so a write that does not commit cannot change
what the key reads. Rows written by versions before per-write references point at the
plain stem; they keep reading, and their object goes when the key is next set or deleted.

Write order and failure windows (the filesystem has no transaction with the database):
- set writes the new object, then the row; the superseded object is removed only after
  the commit. A failed or rolled-back write removes the objects it wrote (best effort,
  and only those no row references, in case a commit reported as failed did land).
- delete removes the row first, then the object, after the commit.
- A crash between the object write and the commit, or between the commit and the removal,
  leaves an object no row references: an orphan, never a wrong read, listed and removed
  by ``state-store orphans``. So do two concurrent sets of one key (each removes the object
  it read as current; the one the other committed in between is left over).
- A reader that read a row just before a writer superseded its object finds the object
  gone and reads the row again (:meth:`~sharedstream.statestore.staterows.StateRows.payload_text`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import uuid
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
        """The deterministic stem of ``scope`` + ``key`` (what rows of older versions hold)."""

    def fresh_reference(self, scope: TaskScope, key: str) -> str:
        """A reference no write has used: the stem plus a random per-write suffix."""
        return f"{self.reference(scope, key)}.{uuid.uuid4().hex}"

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

    def fresh_reference(self, scope: TaskScope, key: str) -> str:
        # The suffix goes before ".json", so list_objects still finds every object.
        return f"{self.reference(scope, key)[:-len('.json')]}.{uuid.uuid4().hex}.json"

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
