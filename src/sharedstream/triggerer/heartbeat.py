"""The process's row in ``triggerer_process``: who runs, where, since when, still alive.

``sharedstream web`` lists the triggerers from these rows and reads each one's
``/status``. The row is written at start, its ``last_seen`` moved every
:data:`INTERVAL_S`, and deleted at a clean stop. A killed process leaves its row: a
reader treats a row not seen for :data:`STALE_AFTER_S` as gone.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, select, update

from sharedstream.statestore.models import held_retry, triggerer_process
from sharedstream.statestore.sql import upsert
from sharedstream.statestore.store import StateStore
from sharedstream.statestore.types import utcnow

INTERVAL_S = 5.0
STALE_AFTER_S = 30.0


@dataclass(frozen=True, slots=True)
class RetryRequest:
    """An operator's ``held retry`` addressed to this process (a ``held_retry`` row)."""

    consumer_group: str
    topic: str
    partition: int
    offset: int


class Heartbeat:
    def __init__(self, store: StateStore, *, version: str, watchers: Sequence[str],
                 groups: Sequence[str], status_url: str | None) -> None:
        self.store = store
        self.id = uuid.uuid4().hex
        self.row = {"id": self.id, "host": socket.gethostname(), "pid": os.getpid(),
                    "version": version, "watchers": json.dumps(list(watchers)),
                    "groups": json.dumps(sorted(groups)), "status_url": status_url}
        self.registered = False
        self.failures = 0  # beats not written (sharedstream_heartbeat_failures_total)

    def register(self) -> None:
        now = utcnow()
        with self.store.engine.begin() as connection:
            upsert(connection, triggerer_process,
                   [{**self.row, "started_at": now, "last_seen": now}], conflict=("id",),
                   update=("last_seen",))
            # Rows of processes long gone (killed) would otherwise stay forever.
            connection.execute(delete(triggerer_process).where(
                triggerer_process.c.last_seen < now - timedelta(hours=1)))
        self.registered = True

    def beat(self) -> list[RetryRequest]:
        """Move ``last_seen``, and take (delete) the retry requests addressed to this
        process. A crash after this commit loses those requests: their messages still go
        again after their backoff, a request only brings that forward."""
        with self.store.engine.begin() as connection:
            found = connection.execute(update(triggerer_process)
                                       .where(triggerer_process.c.id == self.id)
                                       .values(last_seen=utcnow())).rowcount
            rows = connection.execute(select(held_retry).where(
                held_retry.c.triggerer_id == self.id).order_by(held_retry.c.id)).all()
            if rows:
                connection.execute(delete(held_retry).where(
                    held_retry.c.id.in_([row.id for row in rows])))
        if not found:  # deleted by an operator or a cleanup: write it again
            self.register()
        return [RetryRequest(r.consumer_group, r.topic, r.partition, r.offset) for r in rows]

    def unregister(self) -> None:
        with self.store.engine.begin() as connection:
            connection.execute(delete(triggerer_process)
                               .where(triggerer_process.c.id == self.id))
