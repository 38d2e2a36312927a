"""The console's reads of the database: processes, groups, assets, events, state,
rejections, destinations.

Blocking calls (the app runs them on worker threads), plain dictionaries out (the
API's schemas in ``schemas.py`` describe them). Nothing here writes.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from typing import Any

from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.engine import Engine

from sharedstream.delivery.cursor import cursors
from sharedstream.delivery.undelivered import listed
from sharedstream.statestore.events import (
    EventRecord,
    asset_named,
    count_events,
    event_query,
    event_record,
    newest_id,
    page_events,
)
from sharedstream.statestore.models import (
    asset,
    asset_event,
    delivery_cursor,
    rejected_message,
    stream_group,
    task_state_store,
    triggerer_process,
    undelivered_event,
)
from sharedstream.statestore.scopes import AssetScope, TaskScope
from sharedstream.statestore.store import StateStore
from sharedstream.web.settings import ConsoleSettings


class NotFound(LookupError):
    """What the request names does not exist (a 404)."""

def json_list(text: str | None) -> list[str]:
    try:
        found = json.loads(text or "[]")
    except ValueError:
        return []
    return [str(v) for v in found] if isinstance(found, list) else []

def event_json(record: EventRecord) -> dict[str, Any]:
    return {**record.as_json(), "asset_uri": record.asset_uri}


def _entry_json(entry: Any) -> dict[str, Any]:
    return {"key": entry.key, "value": entry.value, "size": entry.size,
            "updated_at": entry.updated_at, "expires_at": entry.expires_at,
            "writer_kind": entry.writer_kind, "writer_id": entry.writer_id,
            "payload_ref": entry.payload_ref}


class DatabaseReads:
    """The console's reads of the database (``Sources.db``): blocking, each on a worker
    thread, one short connection per call."""

    def __init__(self, settings: ConsoleSettings, store: StateStore) -> None:
        self.settings = settings
        self.store = store
        self.engine: Engine = store.engine

    # -- processes and groups ---------------------------------------------------------------

    def process_rows_sync(self) -> list[dict[str, Any]]:
        p = triggerer_process.c
        with self.engine.connect() as connection:
            rows = connection.execute(select(triggerer_process)
                                      .order_by(p.host, p.pid, p.id)).mappings().all()
        return [dict(row) for row in rows]



    def stream_groups_sync(self) -> dict[str, dict[str, Any]]:
        """Recorded groups by consumer group: watchers, topics and connection id."""
        s = stream_group.c
        with self.engine.connect() as connection:
            rows = connection.execute(select(s.group_key, s.consumer_group, s.watchers,
                                             s.updated_at)).all()
        found: dict[str, dict[str, Any]] = {}
        for row in rows:
            topics: list[str] = []
            connection_id: str | None = None
            try:
                key = json.loads(row.group_key)
                # [kind, topics, connection] (+ the consumer group since issue 41)
                if isinstance(key, list) and len(key) >= 3 and isinstance(key[1], list):
                    topics = [str(t) for t in key[1]]
                    connection_id = None if key[2] is None else str(key[2])
            except ValueError:
                pass
            found[row.consumer_group] = {
                "consumer_group": row.consumer_group, "topics": topics,
                "connection": connection_id, "watchers": sorted(json_list(row.watchers)),
                "recorded_at": row.updated_at}
        return found



    # -- assets and events ------------------------------------------------------------------

    def assets_sync(self, *, q: str | None, active: bool | None, limit: int, offset: int
                    ) -> dict[str, Any]:
        a = asset.c
        where = []
        if q:  # % and _ are themselves, not wildcards
            where.append(or_(a.name.icontains(q, autoescape=True),
                             a.uri.icontains(q, autoescape=True)))
        if active is not None:
            where.append(a.active.is_(active))
        with self.engine.connect() as connection:
            total = connection.execute(select(func.count()).select_from(asset)
                                       .where(*where)).scalar_one()
            rows = connection.execute(select(asset).where(*where).order_by(a.name)
                                      .limit(limit).offset(offset)).mappings().all()
            last = self._last_events(connection, [r["id"] for r in rows])
        items = [{"id": r["id"], "name": r["name"], "uri": r["uri"], "active": r["active"],
                  "deactivated_at": r["deactivated_at"], "created_at": r["created_at"],
                  "updated_at": r["updated_at"],
                  "last_event_id": last.get(r["id"], (None, None))[0],
                  "last_event_at": last.get(r["id"], (None, None))[1]} for r in rows]
        return {"items": items, "total": int(total), "limit": limit, "offset": offset}

    @staticmethod
    def _last_events(connection: Any, asset_ids: list[int]
                     ) -> dict[int, tuple[int, datetime]]:
        if not asset_ids:
            return {}
        e = asset_event.c
        newest = connection.execute(select(e.asset_id, func.max(e.id).label("id"))
                                    .where(e.asset_id.in_(asset_ids))
                                    .group_by(e.asset_id)).all()
        ids = {row.id: row.asset_id for row in newest}
        if not ids:
            return {}
        rows = connection.execute(select(e.id, e.created_at).where(e.id.in_(list(ids)))).all()
        return {ids[row.id]: (row.id, row.created_at) for row in rows}

    def asset_sync(self, name: str) -> dict[str, Any]:
        a = asset.c
        with self.engine.connect() as connection:
            row = connection.execute(select(asset).where(a.name == name)).mappings().first()
            if row is None:
                raise NotFound(f"no asset {name!r}")
            last = self._last_events(connection, [row["id"]])
        state = self.store.backend.asset_items(AssetScope(name=name))
        return {"id": row["id"], "name": row["name"], "uri": row["uri"],
                "active": row["active"], "deactivated_at": row["deactivated_at"],
                "created_at": row["created_at"], "updated_at": row["updated_at"],
                "last_event_id": last.get(row["id"], (None, None))[0],
                "last_event_at": last.get(row["id"], (None, None))[1],
                "state": [_entry_json(e) for e in state]}

    @staticmethod
    def _event_filters(*, asset_name: str | None, watcher: str | None, topic: str | None,
                       partition: int | None, message_offset: int | None,
                       since: datetime | None, until: datetime | None) -> list[Any]:
        e = asset_event.c
        where: list[Any] = []
        if asset_name is not None:
            where.append(asset_named(asset_name))
        if watcher is not None:
            where.append(e.watcher == watcher)
        if topic is not None:
            where.append(e.topic == topic)
        if partition is not None:
            where.append(e.partition == partition)
        if message_offset is not None:
            where.append(e.offset == message_offset)
        if since is not None:
            where.append(e.created_at >= since)
        if until is not None:
            where.append(e.created_at < until)
        return where

    def events_sync(self, *, asset_name: str | None = None, watcher: str | None = None,
                    topic: str | None = None, partition: int | None = None,
                    message_offset: int | None = None, since: datetime | None = None,
                    until: datetime | None = None, before: int | None = None,
                    limit: int = 50) -> dict[str, Any]:
        """Events matching every filter, newest (highest id) first, ``limit`` per page; the
        next page starts below ``next_before``. ``total`` is how many match (every page),
        counted up to ``COUNT_CAP`` (``total_exact`` False beyond: "more than")."""
        where = self._event_filters(asset_name=asset_name, watcher=watcher, topic=topic,
                                    partition=partition, message_offset=message_offset,
                                    since=since, until=until)
        paged = where if before is None else [*where, asset_event.c.id < before]
        with self.engine.connect() as connection:
            count = count_events(connection, where)
            # A watcher's events, of no asset: collected first (see page_events).
            few = watcher is not None and asset_name is None and count.exact
            records = page_events(connection, paged, limit + 1, few=few)
        more = len(records) > limit
        records = records[:limit]
        return {"items": [event_json(r) for r in records], "limit": limit,
                "total": count.total, "total_exact": count.exact,
                "next_before": records[-1].id if more and records else None}

    def event_sync(self, event_id: int) -> dict[str, Any]:
        with self.engine.connect() as connection:
            row = connection.execute(event_query().where(asset_event.c.id == event_id)).first()
        if row is None:
            raise NotFound(f"no event {event_id}")
        return event_json(event_record(row))

    def timeline_sync(self, *, asset_name: str, since: datetime, until: datetime,
                      buckets: int = 30, watcher: str | None = None) -> list[int]:
        """Events of the asset per equal time bucket of ``[since, until)``, one query."""
        step = (until - since) / buckets
        e = asset_event.c
        edges = [since + step * i for i in range(buckets + 1)]
        columns = [func.sum(case((and_(e.created_at >= edges[i], e.created_at < edges[i + 1]),
                                  1), else_=0)) for i in range(buckets)]
        where = self._event_filters(asset_name=asset_name, watcher=watcher, topic=None,
                                    partition=None, message_offset=None, since=since,
                                    until=until)
        query = (select(*columns).select_from(asset_event)
                 .join(asset, e.asset_id == asset.c.id).where(*where))
        with self.engine.connect() as connection:
            row = connection.execute(query).one()
        return [int(v or 0) for v in row]

    # -- state ------------------------------------------------------------------------------

    def asset_state_sync(self, name: str) -> list[dict[str, Any]]:
        with self.engine.connect() as connection:
            exists = connection.execute(select(asset.c.id).where(asset.c.name == name)).first()
        if exists is None:
            raise NotFound(f"no asset {name!r}")
        return [_entry_json(e) for e in self.store.backend.asset_items(AssetScope(name=name))]

    def task_scopes_sync(self, *, dag_id: str | None, run_id: str | None,
                         task_id: str | None, limit: int, offset: int) -> dict[str, Any]:
        t = task_state_store.c
        where = [c == v for c, v in ((t.dag_id, dag_id), (t.run_id, run_id),
                                     (t.task_id, task_id)) if v is not None]
        grouped = (select(t.dag_id, t.run_id, t.task_id, t.map_index,
                          func.count().label("keys"), func.max(t.updated_at).label("updated"))
                   .where(*where).group_by(t.dag_id, t.run_id, t.task_id, t.map_index))
        with self.engine.connect() as connection:
            total = connection.execute(select(func.count())
                                       .select_from(grouped.subquery())).scalar_one()
            rows = connection.execute(grouped.order_by(func.max(t.updated_at).desc(),
                                                       t.dag_id, t.run_id, t.task_id,
                                                       t.map_index)
                                      .limit(limit).offset(offset)).all()
        items = [{"dag_id": r.dag_id, "run_id": r.run_id, "task_id": r.task_id,
                  "map_index": r.map_index, "keys": int(r.keys), "updated_at": r.updated}
                 for r in rows]
        return {"items": items, "total": int(total), "limit": limit, "offset": offset}

    def task_state_sync(self, scope: TaskScope) -> list[dict[str, Any]]:
        return [_entry_json(e) for e in self.store.backend.task_items(scope)]


    # -- rejections -------------------------------------------------------------------------

    def rejected_by_watcher_sync(self, names: list[str]) -> list[tuple[str, int]]:
        """Recorded rejections of each of ``names`` (one page of watchers)."""
        if not names:
            return []
        r = rejected_message.c
        with self.engine.connect() as connection:
            return [(row.watcher, int(row.n)) for row in connection.execute(
                select(r.watcher, func.count().label("n")).where(r.watcher.in_(names))
                .group_by(r.watcher))]

    def rejected_sync(self, *, watcher: str | None, reason: str | None, topic: str | None,
                      limit: int, offset: int) -> dict[str, Any]:
        r = rejected_message.c
        where = []
        if watcher is not None:
            where.append(r.watcher == watcher)
        if reason is not None:
            where.append(r.reason.like(f"%{reason}%"))
        if topic is not None:
            where.append(r.topic == topic)
        with self.engine.connect() as connection:
            total = connection.execute(select(func.count()).select_from(rejected_message)
                                       .where(*where)).scalar_one()
            rows = connection.execute(select(rejected_message).where(*where)
                                      .order_by(r.id.desc()).limit(limit).offset(offset)
                                      ).mappings().all()
        return {"items": [dict(row) for row in rows], "total": int(total), "limit": limit,
                "offset": offset}

    def rejected_stats_sync(self) -> dict[str, Any]:
        """Rows per watcher and per (watcher, reason); per reason, the messages (a row is
        one watcher's rejection: two watchers rejecting a message for one reason are two
        rows and one message with that reason)."""
        r = rejected_message.c
        messages = select(r.reason, r.topic_id, r.partition, r.offset).distinct().subquery()
        with self.engine.connect() as connection:
            rows = connection.execute(select(r.watcher, r.reason, func.count().label("n"))
                                      .group_by(r.watcher, r.reason)).all()
            reasons = connection.execute(select(messages.c.reason, func.count().label("n"))
                                         .group_by(messages.c.reason)).all()
        by_watcher: Counter[str] = Counter()
        for row in rows:
            by_watcher[row.watcher] += int(row.n)
        by_reason = Counter({row.reason: int(row.n) for row in reasons})
        return {"total": sum(by_watcher.values()),
                "by_watcher": [{"name": k, "count": v} for k, v in by_watcher.most_common()],
                "by_reason": [{"name": k, "count": v} for k, v in by_reason.most_common()],
                "by_watcher_reason": sorted(
                    ({"watcher": row.watcher, "reason": row.reason, "count": int(row.n)}
                     for row in rows), key=lambda x: (-x["count"], x["watcher"], x["reason"]))}


    # -- destinations -----------------------------------------------------------------------

    def destinations_sync(self) -> dict[str, dict[str, Any]]:
        c, u = delivery_cursor.c, undelivered_event.c
        stored = cursors(self.engine)
        with self.engine.connect() as connection:
            rows = {row.destination: row for row in connection.execute(
                select(c.destination, c.delivered, c.updated_at, c.owner, c.lease_until))}
            refused = {row.destination: int(row.n) for row in connection.execute(
                select(u.destination, func.count().label("n")).group_by(u.destination))}
            newest = newest_id(connection)
        found = {}
        for name in sorted(set(stored) | set(self.settings.destinations) | set(refused)):
            row = rows.get(name)
            cursor = stored.get(name)
            found[name] = {
                "id": name, "kind": self.settings.destinations.get(name),
                "configured": name in self.settings.destinations, "cursor": cursor,
                "delivered": int(row.delivered) if row is not None else None,
                "updated_at": row.updated_at if row is not None else None,
                "holder": row.owner if row is not None else None,
                "lease_until": row.lease_until if row is not None else None,
                "newest_event": newest,
                "lag_events": max(newest - cursor, 0) if cursor is not None else None,
                "lag_seconds": None, "failing": False, "last_error": None,
                "undeliverable": refused.get(name, 0), "reported_by": None}
        return found


    def undelivered_sync(self, *, destination: str | None, limit: int, offset: int
                         ) -> dict[str, Any]:
        u = undelivered_event.c
        where = [] if destination is None else [u.destination == destination]
        with self.engine.connect() as connection:
            total = connection.execute(select(func.count()).select_from(undelivered_event)
                                       .where(*where)).scalar_one()
        rows = listed(self.engine, destination, limit=offset + limit)[offset:]
        items = [{"destination": r.destination, "event": event_json(r.event),
                  "reason": r.reason, "attempts": r.attempts, "created_at": r.created_at}
                 for r in rows]
        return {"items": items, "total": int(total), "limit": limit, "offset": offset}


