"""The audit of operator actions, read: what ``sharedstream audit list`` and the console's
actions page show. Written by ``actions.py`` (one row per action, done or refused); read
here, apart from it, so that listing the audit loads none of the actions' Kafka tooling.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select

from sharedstream.statestore.models import audit_entry
from sharedstream.statestore.store import StateStore


def audit_list(store: StateStore, *, limit: int, since: datetime | None = None,
               offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The audit rows newest first, and how many match (``since``: at or after)."""
    a = audit_entry.c
    where = [] if since is None else [a.at >= since]
    with store.engine.connect() as connection:
        total = connection.execute(select(func.count()).select_from(audit_entry)
                                   .where(*where)).scalar_one()
        rows = connection.execute(select(audit_entry).where(*where)
                                  .order_by(a.id.desc()).limit(limit).offset(offset)
                                  ).mappings().all()
    return [dict(row) for row in rows], int(total)
