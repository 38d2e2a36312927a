"""Payload backends (``[workers] state_backend``): task values outside the database.

The database row keeps only a reference. Each key has two deterministic references, its
slots (:meth:`PayloadBackend.slots`, a pure function of scope and key; slot 0 is the name
rows of older versions hold). A set writes the slot its row does not reference and points
the row at it in the same transaction, so a live object is never overwritten in place: a
write that does not commit cannot change what the key reads.

Write order and failure windows (the filesystem has no transaction with the database):
- set takes the row's lock first (its first statement is an upsert of the row), then writes
  the other slot, then points the row at it, then commits. Writers of one key serialise on
  that lock, so no slot is written by two transactions at once. After the commit the old
  slot is removed under the row's lock again, best effort: a failure is logged, not raised.
- A set that fails inside its transaction removes the slot it wrote (the lock still held);
  a rollback after that (a unit the caller rolls back) leaves the row on its untouched old
  slot and the written one as an orphan no row references, which the next write of the key
  overwrites; ``state-store orphans`` lists it.
- delete removes the row first, then both slots, after the commit, keeping a slot a row
  references again by then. Window: a set of the same key that has written its object but
  not committed when that check runs loses it (its reads fail until the key is set again).
- Only the commit separates a set's object from its row: ``state-store orphans --delete``
  run at that moment removes it unless the object is younger than ``--min-age``. A crash
  in between, or between a commit and its clean-up, leaves an orphan, never a wrong read.
- A reader that read a row just before a writer removed its old slot finds the object gone
  and reads the row again (:meth:`~sharedstream.statestore.staterows.StateRows.payload_text`),
  which may name the same slot again, rewritten by a later write.
  A reader held up past a whole write and into the next one's object write would read that
  uncommitted object: the one window where a read can see a value before its commit.
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
        """The deterministic reference of ``scope`` + ``key``: its slot 0."""

    def slots(self, scope: TaskScope, key: str) -> tuple[str, str]:
        """The key's two references; a set writes the one its row does not hold."""
        first = self.reference(scope, key)
        return first, f"{first}.1"

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

    def slots(self, scope: TaskScope, key: str) -> tuple[str, str]:
        # Slot 1 keeps the ".json" ending, so list_objects (state-store orphans) finds it.
        first = self.reference(scope, key)
        return first, f"{first[:-len('.json')]}.1.json"

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
