"""The ``watcher_hold`` table: holds that must survive a crash (``sharedstream.core.holds``).

:func:`write_holds` runs inside the unit-of-work transaction, so a hold is written
atomically with the watcher's later events and state (never after them).
:func:`load_holds` runs when partitions are assigned: it reads the holds at or above
each partition's committed offset and deletes those below it, which nobody can owe any
more (the commit passed them). Both cost O(rows touched): an open hold is one row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy import and_, bindparam, delete, insert, or_, select
from sqlalchemy.engine import Connection

from sharedstream.core.holds import Taken
from sharedstream.statestore.models import watcher_hold
from sharedstream.statestore.types import utcnow

_c = watcher_hold.c
_DELETE_ONE = delete(watcher_hold).where(
    _c.topic == bindparam("k_topic"), _c.partition == bindparam("k_partition"),
    _c.offset == bindparam("k_offset"), _c.watcher == bindparam("k_watcher"))


def write_holds(connection: Connection, taken: Taken, consumer_group_of: Mapping[str, str]
                ) -> None:
    """Insert the holds ``taken.record`` and delete ``taken.delete``, in the caller's
    transaction. A row that is there already is written again (delete, then insert)."""
    keys = [*taken.record, *taken.delete]
    if keys:
        connection.execute(_DELETE_ONE, [
            {"k_topic": k.topic, "k_partition": k.partition, "k_offset": k.offset,
             "k_watcher": k.watcher} for k in keys])
    if taken.record:
        now = utcnow()
        connection.execute(insert(watcher_hold), [
            {"topic": k.topic, "partition": k.partition, "offset": k.offset,
             "watcher": k.watcher, "consumer_group": consumer_group_of.get(k.watcher, ""),
             "created_at": now} for k in taken.record])


def load_holds(connection: Connection, consumer_group: str,
               partitions: Sequence[tuple[str, int, int | None]]
               ) -> dict[tuple[str, int], dict[int, frozenset[str]]]:
    """``{(topic, partition): {offset: watchers}}`` of this consumer group's holds at or
    above each committed offset (all of them when there is none); the rows below it are
    deleted, in the caller's transaction. One query for all the partitions (a rebalance
    callback waits for it), and one delete when there are stale rows."""
    if not partitions:
        return {}
    bases = {(topic, partition): base for topic, partition, base in partitions}
    rows = connection.execute(select(_c.topic, _c.partition, _c.offset, _c.watcher).where(
        _c.consumer_group == consumer_group,
        or_(*(and_(_c.topic == topic, _c.partition == partition)
              for topic, partition in bases)))).all()
    found: dict[tuple[str, int], dict[int, set[str]]] = {}
    stale = []
    for topic, partition, offset, watcher in rows:
        base = bases.get((topic, partition))
        if base is not None and offset < base:
            stale.append({"k_topic": topic, "k_partition": partition, "k_offset": offset,
                          "k_watcher": watcher})
            continue
        found.setdefault((topic, partition), {}).setdefault(offset, set()).add(watcher)
    if stale:
        connection.execute(_DELETE_ONE, stale)
    return {key: {offset: frozenset(w) for offset, w in held.items()}
            for key, held in found.items()}
