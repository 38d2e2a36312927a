"""Everything the console shows, read from the database, Kafka and the triggerers.

Plain dictionaries out (the API's schemas in ``schemas.py`` describe them), blocking
calls only in the ``*_sync`` helpers (the app runs them on worker threads). Nothing
here writes anywhere, and no value of a connection config or of the database URL
ever reaches an answer: errors are the one-line reasons the ops helpers give.

Caches keep a polled console cheap for the triggerers and the broker: the triggerers'
``/status`` is fetched at most once a second however many pages poll, a group's Kafka
offsets every two seconds, a dead-letter topic every five.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import and_, case, func, or_, select

from sharedstream.delivery.cursor import cursors
from sharedstream.delivery.undelivered import listed
from sharedstream.kafka.connections import ConnectionConfigError, resolve_connection
from sharedstream.ops.clitools import CommandError
from sharedstream.ops.dlq_commands import group_rows, histograms, row_json
from sharedstream.ops.dlq_reader import DeadLetter, DeadLetterError, DeadLetterReader
from sharedstream.ops.offsets import GroupOffsets, GroupPositions, show
from sharedstream.statestore.events import EventRecord, event_query, event_record, newest_id
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
from sharedstream.statestore.types import utcnow
from sharedstream.triggerer.heartbeat import STALE_AFTER_S
from sharedstream.web.history import LagHistory
from sharedstream.web.settings import WebSettings
from sharedstream.web.status_fetch import fetch_status

T = TypeVar("T")
SNAPSHOT_TTL_S = 1.0
OFFSETS_TTL_S = 2.0
DLQ_TTL_S = 5.0


class NotFound(LookupError):
    """What the request names does not exist (a 404)."""


class TtlCache:
    """Values computed at most once per ``ttl`` seconds per key, computed under a lock
    per key (concurrent callers wait for one computation)."""

    def __init__(self, ttl: float, max_keys: int = 256) -> None:
        self.ttl = ttl
        self.max_keys = max_keys
        self._values: dict[Any, tuple[float, Any]] = {}
        self._locks: dict[Any, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, key: Any, compute: Callable[[], T]) -> T:
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            found = self._values.get(key)
            if found is not None and time.monotonic() - found[0] < self.ttl:
                value: T = found[1]
                return value
            value = compute()
            with self._guard:
                if len(self._values) >= self.max_keys:
                    self._values.clear()
                self._values[key] = (time.monotonic(), value)
            return value


@dataclass(slots=True)
class ProcessView:
    """One ``triggerer_process`` row, whether it is alive, and its ``/status`` if fetched."""

    row: dict[str, Any]
    alive: bool
    seen_ago_s: float
    status: dict[str, Any] | None = None
    status_error: str | None = None


@dataclass(slots=True)
class LiveGroup:
    """One consumer group as the live triggerers' ``/status`` describe it: the members'
    group documents, each assigned partition with its owner, the held messages."""

    members: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    partitions: dict[tuple[str, int], tuple[str, dict[str, Any]]] = field(default_factory=dict)
    held: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


@dataclass(slots=True)
class Snapshot:
    taken: float
    processes: list[ProcessView] = field(default_factory=list)
    error: str | None = None  # the database did not answer


def _json_list(text: str | None) -> list[str]:
    try:
        found = json.loads(text or "[]")
    except ValueError:
        return []
    return [str(v) for v in found] if isinstance(found, list) else []


def triggerer_health(view: ProcessView) -> str:
    if not view.alive:
        return "stale"
    if view.row.get("status_url") is None:
        return "no_status"
    if view.status is None:
        return "unreachable"
    return "ok" if view.status.get("ready") else "not_ready"


def event_json(record: EventRecord) -> dict[str, Any]:
    return {**record.as_json(), "asset_uri": record.asset_uri}


def _entry_json(entry: Any) -> dict[str, Any]:
    return {"key": entry.key, "value": entry.value, "size": entry.size,
            "updated_at": entry.updated_at, "expires_at": entry.expires_at,
            "writer_kind": entry.writer_kind, "writer_id": entry.writer_id,
            "payload_ref": entry.payload_ref}


class Sources:
    """The console's reads. One instance per app; safe to call from many threads."""

    def __init__(self, settings: WebSettings, store: StateStore,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.store = store
        self.engine = store.engine
        self.clock = clock
        self.history = LagHistory(settings.history_seconds)
        self._snapshot: Snapshot | None = None
        self._snapshot_lock: asyncio.Lock | None = None
        self._snapshot_loop: asyncio.AbstractEventLoop | None = None
        self._offsets_cache = TtlCache(OFFSETS_TTL_S)
        self._dlq_cache = TtlCache(DLQ_TTL_S, max_keys=32)
        self._admins: dict[tuple[str, str], GroupOffsets] = {}
        self._admin_lock = threading.Lock()

    # -- triggerers -------------------------------------------------------------------------

    def process_rows_sync(self) -> list[dict[str, Any]]:
        p = triggerer_process.c
        with self.engine.connect() as connection:
            rows = connection.execute(select(triggerer_process)
                                      .order_by(p.host, p.pid, p.id)).mappings().all()
        return [dict(row) for row in rows]

    async def snapshot(self, *, max_age: float = SNAPSHOT_TTL_S) -> Snapshot:
        """The processes and their ``/status``, at most ``max_age`` seconds old; each fresh
        one adds a lag sample to the history."""
        loop = asyncio.get_running_loop()
        if self._snapshot_lock is None or self._snapshot_loop is not loop:
            self._snapshot_lock, self._snapshot_loop = asyncio.Lock(), loop
        async with self._snapshot_lock:
            current = self._snapshot
            if current is not None and self.clock() - current.taken < max_age:
                return current
            fresh = await self._take_snapshot()
            self._snapshot = fresh
            self._record_lag(fresh)
            return fresh

    async def _take_snapshot(self) -> Snapshot:
        now = utcnow()
        try:
            rows = await asyncio.to_thread(self.process_rows_sync)
        except Exception as exc:  # the database is down: say so, show what Kafka has
            return Snapshot(self.clock(), error=f"database: {type(exc).__name__}")
        views = []
        for row in rows:
            ago = (now - row["last_seen"]).total_seconds()
            views.append(ProcessView(row, ago <= STALE_AFTER_S, max(ago, 0.0)))

        async def fetch(view: ProcessView) -> None:
            try:
                view.status = await asyncio.to_thread(
                    fetch_status, view.row["status_url"], self.settings.status_networks,
                    self.settings.status_timeout)
            except (OSError, ValueError) as exc:
                view.status_error = str(exc)

        await asyncio.gather(*(fetch(v) for v in views if v.alive and v.row["status_url"]))
        return Snapshot(self.clock(), views)

    def _record_lag(self, snapshot: Snapshot) -> None:
        for name, live in self.live_groups(snapshot).items():
            lags = {key: part["lag"] for key, (_, part) in live.partitions.items()
                    if isinstance(part.get("lag"), int)}
            self.history.record(snapshot.taken, name, lags)

    def triggerer_json(self, view: ProcessView) -> dict[str, Any]:
        row = view.row
        status = view.status or {}
        return {
            "id": row["id"], "host": row["host"], "pid": row["pid"], "version": row["version"],
            "modules": _json_list(row["watchers"]), "groups": _json_list(row["groups"]),
            "status_url": row["status_url"], "started_at": row["started_at"],
            "last_seen": row["last_seen"], "seen_ago_s": round(view.seen_ago_s, 3),
            "alive": view.alive,
            "ready": bool(status["ready"]) if "ready" in status else None,
            "not_ready": [str(r) for r in status.get("not_ready", [])],
            "status_error": view.status_error, "health": triggerer_health(view)}

    async def triggerers(self, state: str = "all") -> list[dict[str, Any]]:
        snapshot = await self.snapshot()
        views = [v for v in snapshot.processes
                 if state == "all" or (state == "alive") == v.alive]
        return [self.triggerer_json(v) for v in views]

    async def triggerer(self, triggerer_id: str) -> dict[str, Any]:
        snapshot = await self.snapshot()
        for view in snapshot.processes:
            if view.row["id"] == triggerer_id:
                return {**self.triggerer_json(view), "status": view.status}
        raise NotFound(f"no triggerer {triggerer_id!r}")

    # -- groups -----------------------------------------------------------------------------

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
                if isinstance(key, list) and len(key) == 3 and isinstance(key[1], list):
                    topics = [str(t) for t in key[1]]
                    connection_id = None if key[2] is None else str(key[2])
            except ValueError:
                pass
            found[row.consumer_group] = {
                "consumer_group": row.consumer_group, "topics": topics,
                "connection": connection_id, "watchers": sorted(_json_list(row.watchers)),
                "recorded_at": row.updated_at}
        return found

    def live_groups(self, snapshot: Snapshot) -> dict[str, LiveGroup]:
        """Per consumer group, what the live triggerers' ``/status`` say about it."""
        groups: dict[str, LiveGroup] = {}
        for view in snapshot.processes:
            if not view.alive or view.status is None:
                continue
            owner = view.row["id"]
            for doc in view.status.get("groups", []):
                live = groups.setdefault(str(doc.get("consumer_group")), LiveGroup())
                live.members.append((owner, doc))
                for part in doc.get("partitions", []):
                    live.partitions[(str(part["topic"]), int(part["partition"]))] = (owner, part)
                live.held.extend((owner, held) for held in doc.get("held", []))
        return groups

    def _group_summary(self, name: str, recorded: dict[str, Any] | None,
                       live: LiveGroup | None) -> dict[str, Any]:
        live = live or LiveGroup()
        topics = (recorded or {}).get("topics") or sorted(
            {t for t, _ in live.partitions} | {str(p["topic"]) for _, d in live.members
                                                 for p in d.get("partitions", [])})
        lags = [p["lag"] for _, p in live.partitions.values() if isinstance(p.get("lag"), int)]
        polling = any(doc.get("polling") for _, doc in live.members)
        if not live.members:
            health = "no_triggerer"
        elif not polling:
            health = "not_polling"
        elif live.held:
            health = "held"
        else:
            health = "ok"
        return {"consumer_group": name, "topics": list(topics),
                "connection": (recorded or {}).get("connection"),
                "watchers": (recorded or {}).get("watchers")
                or sorted({w for _, d in live.members for w in d.get("cohort", [])}),
                "recorded_at": (recorded or {}).get("recorded_at"),
                "triggerers": sorted({owner for owner, _ in live.members}),
                "partition_count": len(live.partitions), "lag": sum(lags) if lags else None,
                "held": len(live.held), "polling": polling, "health": health}

    async def groups(self) -> list[dict[str, Any]]:
        snapshot = await self.snapshot()
        recorded = await asyncio.to_thread(self.stream_groups_sync)
        live = self.live_groups(snapshot)
        return [self._group_summary(name, recorded.get(name), live.get(name))
                for name in sorted(set(recorded) | set(live))]

    def _connection(self, connection_id: str | None) -> Mapping[str, Any]:
        return resolve_connection(connection_id or self.settings.connection,
                                  self.settings.connections)

    def close(self) -> None:
        """Release the cached admin clients on this thread (see :class:`GroupOffsets`),
        once no request runs any more (at shutdown)."""
        with self._admin_lock:
            for admin in self._admins.values():
                admin.close()
            self._admins.clear()

    def _admin(self, group: str, connection_id: str | None) -> GroupOffsets:
        key = (group, connection_id or self.settings.connection)
        with self._admin_lock:
            admin = self._admins.get(key)
            if admin is None:
                if len(self._admins) > 64:
                    self._admins.clear()  # not closed: a request may still be using one
                admin = self._admins[key] = GroupOffsets(
                    self._connection(connection_id), group, self.settings.kafka_timeout)
            return admin

    def group_offsets_sync(self, group: str, connection_id: str | None
                           ) -> tuple[GroupPositions | None, str | None]:
        """``sharedstream offsets show``'s positions of the group, or why there are none."""

        def compute() -> tuple[GroupPositions | None, str | None]:
            try:
                return show(self._admin(group, connection_id)), None
            except (CommandError, ConnectionConfigError) as exc:
                return None, str(exc)
            except Exception as exc:  # librdkafka's own errors: one line, no config
                return None, f"kafka: {type(exc).__name__}"

        return self._offsets_cache.get((group, connection_id), compute)

    async def group(self, name: str) -> dict[str, Any]:
        snapshot = await self.snapshot()
        recorded = (await asyncio.to_thread(self.stream_groups_sync)).get(name)
        live = self.live_groups(snapshot).get(name)
        if recorded is None and live is None:
            raise NotFound(f"no consumer group {name!r}")
        summary = self._group_summary(name, recorded, live)
        live = live or LiveGroup()
        positions, error = await asyncio.to_thread(self.group_offsets_sync, name,
                                                   summary["connection"])
        by_key = {(p.topic, p.partition): p for p in (positions.partitions if positions else [])}
        partitions = []
        for key in sorted(set(by_key) | set(live.partitions)):
            owner, part = live.partitions.get(key, (None, {}))
            pos = by_key.get(key)
            live_lag = part.get("lag") if isinstance(part.get("lag"), int) else None
            partitions.append({
                "topic": key[0], "partition": key[1], "owner": owner,
                "lag": live_lag if live_lag is not None else (pos.lag if pos else None),
                "lag_source": "triggerer" if live_lag is not None
                else ("kafka" if pos else None),
                "committed": pos.committed if pos else part.get("committed"),
                "remembered": len(pos.remembered) if pos else part.get("remembered"),
                "log_start": pos.log_start if pos else None,
                "log_end": pos.log_end if pos else part.get("end"),
                "committed_lag": pos.lag if pos else None,
                "base": part.get("base"), "floor": part.get("floor"),
                "position": part.get("position"), "held": part.get("held"),
                "open_bytes": part.get("open_bytes"), "fetch": part.get("fetch"),
                "paused": part.get("paused")})
        members = [{
            "triggerer": owner, "cohort": list(doc.get("cohort", [])),
            "present": list(doc.get("present", [])), "polling": bool(doc.get("polling")),
            "paused": bool(doc.get("paused")), "in_flight": int(doc.get("in_flight", 0)),
            "queued": int(doc.get("queued", 0)), "received": int(doc.get("received", 0)),
            "redelivered": int(doc.get("redelivered", 0))} for owner, doc in live.members]
        return {**summary, "members": members, "partitions": partitions,
                "held_messages": [self._held_json(name, owner, h) for owner, h in live.held],
                "kafka": {"state": positions.state if positions else None,
                          "live_members": positions.live_members if positions else None,
                          "error": error}}

    async def lag(self, name: str) -> dict[str, Any]:
        """:meth:`lag_series` of a group the console knows (recorded or live)."""
        snapshot = await self.snapshot()
        recorded = await asyncio.to_thread(self.stream_groups_sync)
        if name not in recorded and name not in self.live_groups(snapshot):
            raise NotFound(f"no consumer group {name!r}")
        return self.lag_series(name)

    def lag_series(self, name: str) -> dict[str, Any]:
        now = self.clock()
        series = self.history.series(name, now)
        return {"consumer_group": name, "window_s": self.history.window_s, "now": now,
                "series": [{"topic": t, "partition": p,
                            "samples": [[round(ts, 3), lag] for ts, lag in samples]}
                           for (t, p), samples in series.items()]}

    @staticmethod
    def _held_json(group: str, owner: str, held: Mapping[str, Any]) -> dict[str, Any]:
        reasons = {str(k): str(v) for k, v in (held.get("reasons") or {}).items()}
        return {"consumer_group": group, "triggerer": owner, "topic": str(held["topic"]),
                "partition": int(held["partition"]), "offset": int(held["offset"]),
                "watchers": sorted(reasons), "reasons": reasons,
                "attempts": {str(k): int(v) for k, v in (held.get("attempts") or {}).items()},
                "rounds": int(held.get("rounds") or 0), "retry_in": held.get("retry_in")}

    async def held(self, *, group: str | None = None, watcher: str | None = None,
                   topic: str | None = None, partition: int | None = None
                   ) -> list[dict[str, Any]]:
        snapshot = await self.snapshot()
        found = []
        for name, live in sorted(self.live_groups(snapshot).items()):
            if group is not None and name != group:
                continue
            for owner, held in live.held:
                item = self._held_json(name, owner, held)
                if watcher is not None and watcher not in item["reasons"]:
                    continue
                if topic is not None and item["topic"] != topic:
                    continue
                if partition is not None and item["partition"] != partition:
                    continue
                found.append(item)
        return sorted(found, key=lambda h: (h["consumer_group"], h["topic"], h["partition"],
                                            h["offset"]))

    async def watchers(self, group: str | None = None) -> list[dict[str, Any]]:
        snapshot = await self.snapshot()
        recorded = await asyncio.to_thread(self.stream_groups_sync)
        rejected = dict(await asyncio.to_thread(self._rejected_by_watcher_sync))
        live = self.live_groups(snapshot)
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for name in set(recorded) | set(live):
            if group is not None and name != group:
                continue
            members = live.get(name, LiveGroup())
            names = set((recorded.get(name) or {}).get("watchers", []))
            names |= {w for _, d in members.members for w in d.get("cohort", [])}
            present = {w for _, d in members.members for w in d.get("present", [])}
            for watcher in names:
                held = sum(1 for _, h in members.held if watcher in (h.get("reasons") or {}))
                found[(name, watcher)] = {
                    "name": watcher, "consumer_group": name,
                    "topics": (recorded.get(name) or {}).get("topics", []),
                    "present": watcher in present, "held": held,
                    "rejected": int(rejected.get(watcher, 0))}
        return [found[k] for k in sorted(found, key=lambda k: (k[1], k[0]))]

    # -- overview ---------------------------------------------------------------------------

    async def overview(self) -> dict[str, Any]:
        snapshot = await self.snapshot()
        triggerers = [self.triggerer_json(v) for v in snapshot.processes]
        groups = await self.groups()
        destinations = await self.destinations()
        return {"database_error": snapshot.error, "triggerers": triggerers, "groups": groups,
                "destinations": destinations,
                "counts": {"alive": sum(1 for t in triggerers if t["alive"]),
                           "stale": sum(1 for t in triggerers if not t["alive"]),
                           "groups": len(groups),
                           "held": sum(g["held"] for g in groups),
                           "failing_destinations": sum(1 for d in destinations
                                                       if d["failing"])}}

    # -- assets and events ------------------------------------------------------------------

    def assets_sync(self, *, q: str | None, active: bool | None, limit: int, offset: int
                    ) -> dict[str, Any]:
        a = asset.c
        where = []
        if q:
            pattern = f"%{q}%"
            where.append(or_(a.name.like(pattern), a.uri.like(pattern)))
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
        e, a = asset_event.c, asset.c
        where: list[Any] = []
        if asset_name is not None:
            where.append(a.name == asset_name)
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
        next page starts below ``next_before``."""
        where = self._event_filters(asset_name=asset_name, watcher=watcher, topic=topic,
                                    partition=partition, message_offset=message_offset,
                                    since=since, until=until)
        if before is not None:
            where.append(asset_event.c.id < before)
        query = event_query().where(*where).order_by(asset_event.c.id.desc()).limit(limit + 1)
        with self.engine.connect() as connection:
            records = [event_record(row) for row in connection.execute(query)]
        more = len(records) > limit
        records = records[:limit]
        return {"items": [event_json(r) for r in records], "limit": limit,
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

    # -- rejections and dead letters --------------------------------------------------------

    def _rejected_by_watcher_sync(self) -> list[tuple[str, int]]:
        r = rejected_message.c
        with self.engine.connect() as connection:
            return [(row.watcher, int(row.n)) for row in connection.execute(
                select(r.watcher, func.count().label("n")).group_by(r.watcher))]

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
        r = rejected_message.c
        with self.engine.connect() as connection:
            rows = connection.execute(select(r.watcher, r.reason, func.count().label("n"))
                                      .group_by(r.watcher, r.reason)).all()
        by_watcher: Counter[str] = Counter()
        by_reason: Counter[str] = Counter()
        for row in rows:
            by_watcher[row.watcher] += int(row.n)
            by_reason[row.reason] += int(row.n)
        return {"total": sum(by_watcher.values()),
                "by_watcher": [{"name": k, "count": v} for k, v in by_watcher.most_common()],
                "by_reason": [{"name": k, "count": v} for k, v in by_reason.most_common()],
                "by_watcher_reason": sorted(
                    ({"watcher": row.watcher, "reason": row.reason, "count": int(row.n)}
                     for row in rows), key=lambda x: (-x["count"], x["watcher"], x["reason"]))}

    def _read_dead_letters(self, topic: str, since: datetime | None
                           ) -> tuple[list[DeadLetter], bool]:
        """The newest ``dlq_max_records`` records of ``topic`` (or those since ``since``),
        and whether older ones were left out."""
        connection = self._connection(None)
        cap = self.settings.dlq_max_records
        timeout = self.settings.kafka_timeout
        with DeadLetterReader(connection, topic, since=since, timeout=timeout) as reader:
            ranges = reader.ranges
            if reader.total <= cap:
                return list(reader), False
        share = max(cap // max(len(ranges), 1), 1)
        starts = {r.partition: max(r.start, r.end - share) for r in ranges}
        with DeadLetterReader(connection, topic, since=since, start_offsets=starts,
                              timeout=timeout) as reader:
            return list(reader), True

    def dead_letters_sync(self, *, topic: str, since: datetime | None, watcher: str | None,
                          reason: str | None, limit: int, offset: int) -> dict[str, Any]:
        if topic not in self.settings.dlq_topics:
            raise NotFound(f"{topic!r} is not one of the console's dead-letter topics "
                           "(--dlq-topic)")
        bucket = None if since is None else since.replace(microsecond=0)

        def read() -> tuple[list[DeadLetter], bool, str | None]:
            try:
                records, truncated = self._read_dead_letters(topic, bucket)
                return records, truncated, None
            except (DeadLetterError, ConnectionConfigError) as exc:
                return [], False, str(exc)

        records, truncated, error = self._dlq_cache.get((topic, bucket), read)
        rows = group_rows(records)
        reasons, watchers = histograms(rows)
        pairs: Counter[tuple[str, str]] = Counter(
            (w, why) for row in rows if not row.first.foreign
            for w, why in row.first.rejections.items())
        selected = [row for row in rows if _dead_letter_matches(row.first, watcher, reason)]
        selected.reverse()  # newest first
        page = selected[offset:offset + limit]
        return {"topic": topic, "read": len(records), "distinct": len(rows),
                "foreign": sum(1 for r in rows if r.first.foreign), "truncated": truncated,
                "error": error,
                "stats": {"reasons": dict(reasons.most_common()),
                          "watchers": dict(watchers.most_common()),
                          "by_watcher_reason": [{"watcher": w, "reason": why, "count": n}
                                                for (w, why), n in pairs.most_common()]},
                "items": [row_json(r) for r in page], "total": len(selected), "limit": limit,
                "offset": offset}

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

    async def destinations(self) -> list[dict[str, Any]]:
        snapshot = await self.snapshot()
        try:
            found = await asyncio.to_thread(self.destinations_sync)
        except Exception:
            found = {}
        for view in snapshot.processes:
            for doc in (view.status or {}).get("destinations", []):
                name = str(doc.get("id"))
                entry = found.setdefault(name, {
                    "id": name, "kind": None, "configured": False, "cursor": None,
                    "delivered": None, "updated_at": None, "holder": None,
                    "lease_until": None, "newest_event": None, "lag_events": None,
                    "lag_seconds": None, "failing": False, "last_error": None,
                    "undeliverable": 0, "reported_by": None})
                # The process holding the lease knows best; others only watch.
                if entry["reported_by"] is None or doc.get("holder"):
                    entry["kind"] = entry["kind"] or doc.get("kind")
                    for key in ("lag_events", "lag_seconds", "last_error"):
                        if doc.get(key) is not None:
                            entry[key] = doc[key]
                    entry["failing"] = bool(doc.get("failing")) or entry["failing"]
                    entry["reported_by"] = view.row["id"]
        for entry in found.values():
            entry["health"] = ("failing" if entry["failing"] else
                               "idle" if entry["cursor"] is None else "ok")
        return [found[k] for k in sorted(found)]

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


def _dead_letter_matches(record: DeadLetter, watcher: str | None, reason: str | None) -> bool:
    if watcher is not None and watcher not in record.rejections:
        return False
    if reason is not None:
        texts: Iterable[str] = record.rejections.values() if not record.foreign \
            else [record.problem or "<foreign>"]
        return any(reason in text for text in texts)
    return True


def window(since: datetime | None, until: datetime | None, default: timedelta
           ) -> tuple[datetime, datetime]:
    """``[since, until)`` with the defaults: until now, since ``default`` before until."""
    end = until or utcnow()
    return (since or end - default), end


def paginate(items: Sequence[T], limit: int, offset: int) -> dict[str, Any]:
    """One limit/offset page of a list computed whole (live data: triggerers, held)."""
    return {"items": list(items[offset:offset + limit]), "total": len(items),
            "limit": limit, "offset": offset}
