"""Everything the console shows, read from the database, Kafka and the triggerers.

Plain dictionaries out (the API's schemas in ``schemas.py`` describe them), blocking
calls only in the ``*_sync`` helpers (the app runs them on worker threads). Nothing
here writes anywhere, and no value of a connection config or of the database URL
ever reaches an answer: errors are the one-line reasons the ops helpers give.

The reads are split by job: the database (``dbreads.py``), the broker's view of groups
(``kafkaview.py``), dead-letter topics (``deadletters.py``), and here the live
triggerers joined with both (``live.py`` has the joins). Caches keep a polled console
cheap for the triggerers and the broker: the triggerers' ``/status`` is fetched at
most once a second however many pages poll, a group's Kafka offsets every two
seconds, a dead-letter topic every five.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sharedstream.ops.offsets import GroupPositions
from sharedstream.statestore.store import StateStore
from sharedstream.statestore.types import utcnow
from sharedstream.triggerer.heartbeat import STALE_AFTER_S
from sharedstream.web.dbreads import DatabaseReads, NotFound, json_list
from sharedstream.web.deadletters import DeadLetterReads
from sharedstream.web.history import LagHistory
from sharedstream.web.kafkaview import KafkaReads
from sharedstream.web.listing import folded, held_index, held_json, memo, public, watcher_index
from sharedstream.web.live import (
    LiveGroup,
    ProcessView,
    Snapshot,
    lag_source,
    live_groups,
    merged_lags,
    triggerer_health,
    unowned,
)
from sharedstream.web.settings import ConsoleSettings
from sharedstream.web.status_fetch import fetch_status

__all__ = ["NotFound", "Sources", "paginate", "window"]

T = TypeVar("T")
SNAPSHOT_TTL_S = 1.0
# The watcher and held lists show a snapshot up to this old while a fresh one is taken.
LIST_STALE_S = 5.0
# The broker's lag stands in for a partition no triggerer reports while its last read
# is at most this old (a broker that stopped answering leaves no flat line for ever).
KAFKA_SAMPLE_MAX_AGE_S = 15.0


class Sources:
    """The console's reads. One instance per app; safe to call from many threads.

    The live reads (the triggerers' ``/status`` joined with the records) are here; the
    rest are its parts, each with its own caches: ``db`` (:class:`DatabaseReads`),
    ``kafka`` (:class:`KafkaReads`, the groups' positions) and ``dlq``
    (:class:`DeadLetterReads`). A page names the part it reads.
    """

    def __init__(self, settings: ConsoleSettings, store: StateStore,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.store = store
        self.db = DatabaseReads(settings, store)
        self.kafka = KafkaReads(settings)
        self.dlq = DeadLetterReads(settings)
        self.clock = clock
        self.history = LagHistory(settings.history_seconds)
        self._snapshot: Snapshot | None = None
        self._snapshot_lock: asyncio.Lock | None = None
        self._snapshot_loop: asyncio.AbstractEventLoop | None = None
        self._list_refresh: asyncio.Task[None] | None = None

    # -- triggerers -------------------------------------------------------------------------

    def close(self) -> None:
        """Release the broker clients once no request runs any more (at shutdown)."""
        self.kafka.close()

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

    async def list_snapshot(self) -> Snapshot:
        """The snapshot the watcher and held lists read: the current one while it is at
        most ``LIST_STALE_S`` old, a fresh one taken meanwhile in the background once it
        is past ``SNAPSHOT_TTL_S`` (its lists indexed on a worker thread). With 10,000
        watchers, fetching, parsing and indexing the triggerers' ``/status`` is a few
        hundred milliseconds that no page waits for; a page is at most one refresh
        behind (an older snapshot is waited for, as every other read does)."""
        current = self._snapshot
        if current is None or self.clock() - current.taken > LIST_STALE_S:
            return await self.snapshot()
        running = self._list_refresh
        if self.clock() - current.taken >= SNAPSHOT_TTL_S and (
                running is None or running.done()
                or running.get_loop() is not asyncio.get_running_loop()):
            self._list_refresh = asyncio.create_task(self._refresh_lists())
        return current

    async def _refresh_lists(self) -> None:
        fresh = await self.snapshot()
        for name, build in (("watchers", watcher_index), ("held", held_index)):
            await asyncio.to_thread(memo, fresh, name, build)

    def _rows_sync(self) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
        return self.db.process_rows_sync(), self.db.stream_groups_sync()

    async def _take_snapshot(self) -> Snapshot:
        now = utcnow()
        try:
            rows, recorded = await asyncio.to_thread(self._rows_sync)
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
        return Snapshot(self.clock(), views, recorded=recorded)

    def _record_lag(self, snapshot: Snapshot) -> None:
        """One sample per known group: the triggerers' lag where they report it, the
        broker's last committed lag (not waited for; read anew in the background) for
        the other partitions of the group's topics."""
        live = live_groups(snapshot)
        for name in set(snapshot.recorded) | set(live):
            recorded = snapshot.recorded.get(name) or {}
            connection = recorded.get("connection")
            self.kafka.refresh_positions(name, connection)
            positions = self.kafka.last_positions(name, connection, KAFKA_SAMPLE_MAX_AGE_S)
            self._sample(snapshot.taken, name, recorded.get("topics") or [], live.get(name),
                         positions)

    def _sample(self, now: float, name: str, topics: Sequence[str], live: LiveGroup | None,
                positions: GroupPositions | None) -> None:
        lags = merged_lags(live, positions)
        if topics:
            lags = {k: v for k, v in lags.items() if k[0] in topics}
        self.history.record(now, name, {k: lag for k, (lag, _) in lags.items()},
                            {k: source for k, (_, source) in lags.items()})

    def triggerer_json(self, view: ProcessView) -> dict[str, Any]:
        row = view.row
        status = view.status or {}
        return {
            "id": row["id"], "host": row["host"], "pid": row["pid"], "version": row["version"],
            "modules": json_list(row["watchers"]), "groups": json_list(row["groups"]),
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

    def live_groups(self, snapshot: Snapshot) -> dict[str, LiveGroup]:
        """Per consumer group, what the live triggerers' ``/status`` say about it."""
        return live_groups(snapshot)

    def _group_summary(self, name: str, recorded: dict[str, Any] | None,
                       live: LiveGroup | None, positions: GroupPositions | None
                       ) -> dict[str, Any]:
        live = live or LiveGroup()
        topics = (recorded or {}).get("topics") or sorted(
            {t for t, _ in live.partitions} | {str(p["topic"]) for _, d in live.members
                                                 for p in d.get("partitions", [])})
        lags = {k: v for k, v in merged_lags(live, positions).items() if k[0] in topics}
        nobody = unowned(live, positions, topics)
        polling = any(doc.get("polling") for _, doc in live.members)
        if not live.members:
            health = "no_triggerer"
        elif not polling:
            health = "not_polling"
        elif nobody:
            health = "unowned"
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
                "partition_count": len(set(lags) | set(live.partitions)),
                "assigned": len(live.partitions),
                "unowned": [f"{t}[{p}]" for t, p in nobody],
                "lag": sum(lag for lag, _ in lags.values()) if lags else None,
                "lag_source": lag_source(source for _, source in lags.values()),
                "held": len(live.held), "polling": polling, "health": health}

    async def groups(self) -> list[dict[str, Any]]:
        """Every group with its lag: the broker's positions are the last read (waited
        for only on a group's first), so a broker that does not answer holds nothing up."""
        snapshot = await self.snapshot()
        recorded = snapshot.recorded
        live = self.live_groups(snapshot)
        names = sorted(set(recorded) | set(live))
        positions = await asyncio.gather(*(
            self.kafka.positions(name, (recorded.get(name) or {}).get("connection"), fresh=False)
            for name in names))
        return [self._group_summary(name, recorded.get(name), live.get(name), found)
                for name, (found, _) in zip(names, positions, strict=True)]

    async def group(self, name: str) -> dict[str, Any]:
        snapshot = await self.snapshot()
        recorded = snapshot.recorded.get(name)
        live = self.live_groups(snapshot).get(name)
        if recorded is None and live is None:
            raise NotFound(f"no consumer group {name!r}")
        positions, error = await self.kafka.positions(name, (recorded or {}).get("connection"),
                                                fresh=True)
        summary = self._group_summary(name, recorded, live, positions)
        self._sample(self.clock(), name, summary["topics"], live, positions)
        live = live or LiveGroup()
        nobody = set(summary["unowned"])
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
                "paused": part.get("paused"), "unowned": f"{key[0]}[{key[1]}]" in nobody})
        members = [{
            "triggerer": owner, "cohort": list(doc.get("cohort", [])),
            "present": list(doc.get("present", [])), "polling": bool(doc.get("polling")),
            "paused": bool(doc.get("paused")), "in_flight": int(doc.get("in_flight", 0)),
            "queued": int(doc.get("queued", 0)), "received": int(doc.get("received", 0)),
            "redelivered": int(doc.get("redelivered", 0))} for owner, doc in live.members]
        return {**summary, "members": members, "partitions": partitions,
                "held_messages": [held_json(name, owner, h) for owner, h in live.held],
                "kafka": {"state": positions.state if positions else None,
                          "live_members": positions.live_members if positions else None,
                          "error": error}}

    async def lag(self, name: str) -> dict[str, Any]:
        """:meth:`lag_series` of a group the console knows (recorded or live)."""
        snapshot = await self.snapshot()
        if name not in snapshot.recorded and name not in self.live_groups(snapshot):
            raise NotFound(f"no consumer group {name!r}")
        return self.lag_series(name)

    def lag_series(self, name: str) -> dict[str, Any]:
        now = self.clock()
        series = self.history.series(name, now)
        return {"consumer_group": name, "window_s": self.history.window_s, "now": now,
                "series": [{"topic": t, "partition": p,
                            "samples": [[round(ts, 3), lag] for ts, lag in samples]}
                           for (t, p), samples in series.items()]}

    async def held(self, *, group: str | None = None, watcher: str | None = None,
                   topic: str | None = None, partition: int | None = None,
                   q: str | None = None) -> list[dict[str, Any]]:
        """The held messages matching every filter (``q``: part of the topic or of a
        watcher's name, any case), by group, topic, partition and offset."""
        index = memo(await self.list_snapshot(), "held", held_index)
        text = folded(q)
        return [public(h) for h in index
                if (group is None or h["consumer_group"] == group)
                and (watcher is None or watcher in h["reasons"])
                and (topic is None or h["topic"] == topic)
                and (partition is None or h["partition"] == partition)
                and (text is None or text in h["_search"])]

    async def watcher_list(self, group: str | None = None, q: str | None = None
                           ) -> list[dict[str, Any]]:
        """Every watcher of ``group`` (or of all) whose name holds ``q`` (any case), by
        name then group, without its rejection count (see :meth:`watchers`)."""
        index = memo(await self.list_snapshot(), "watchers", watcher_index)
        return [index.row(k) for k in index.select(group, folded(q))]

    async def watchers(self, group: str | None = None, q: str | None = None, *,
                       limit: int, offset: int) -> dict[str, Any]:
        """One page of :meth:`watcher_list`, each with its rejections: counted for the
        page's watchers only (the dead-letter tallies are the topics' cached counts)."""
        index = memo(await self.list_snapshot(), "watchers", watcher_index)
        found = index.select(group, folded(q))
        page = [index.row(k) for k in found[offset:offset + limit]]
        names = sorted({w["name"] for w in page})
        rejected = dict(await asyncio.to_thread(self.db.rejected_by_watcher_sync, names))
        dead, unread = await asyncio.to_thread(self.dlq.dead_letter_watchers_sync)
        error = "; ".join(unread) or None
        items = [{**w, "rejected": int(rejected.get(w["name"], 0)) + dead[w["name"]],
                  "rejected_error": error} for w in page]
        return {"items": items, "total": len(found), "limit": limit, "offset": offset}

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

    # -- destinations -----------------------------------------------------------------------

    async def destinations(self) -> list[dict[str, Any]]:
        snapshot = await self.snapshot()
        try:
            found = await asyncio.to_thread(self.db.destinations_sync)
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



def window(since: datetime | None, until: datetime | None, default: timedelta
           ) -> tuple[datetime, datetime]:
    """``[since, until)`` with the defaults: until now, since ``default`` before until
    (from the first instant a datetime holds for an ``until`` less than that after it)."""
    end = until or utcnow()
    if since is None:
        end = max(end, datetime.min.replace(tzinfo=UTC) + default)
        since = end - default
    return since, end


def paginate(items: Sequence[T], limit: int, offset: int) -> dict[str, Any]:
    """One limit/offset page of a list computed whole (live data: triggerers, held)."""
    return {"items": list(items[offset:offset + limit]), "total": len(items),
            "limit": limit, "offset": offset}
