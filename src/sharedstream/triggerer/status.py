"""``GET /status``: what this triggerer is doing, as JSON, for ``sharedstream web``.

The document is built on the event loop (the ledgers are the loop's), asked for from
the health server's thread with a timeout: a busy loop answers late, never wrongly.
Per group: its cohort and counts; per assigned partition, the committed offset, the
ledger's floor and position, the log end and the true lag (end minus floor: what is
left to resolve, counting progress remembered above the commit), whether it is
paused and why (``paused_because``, a ``PauseReason`` value of core/backpressure.py);
while the group owns no partition, for how long (``waiting_for_partitions``: after a
crash, the broker keeps them for the dead member until its session times out);
every held message with who failed it, why, and when it goes again. Per
destination: its cursor and lag. Values come from the process's own state; no secret
is in any of them.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from sharedstream import __version__

if TYPE_CHECKING:
    from sharedstream.core.backpressure import PauseReason
    from sharedstream.triggerer.view import TriggererView

ANSWER_WITHIN_S = 5.0
WAITING = ("no partition assigned yet: a previous member that stopped without leaving the "
           "group holds them until its session times out (session_timeout_s), or other "
           "members hold them all")


def status_document(triggerer: TriggererView) -> dict[str, Any]:
    """The document; call it on the event loop."""
    names = {g.key: g.consumer_group for g in triggerer.plan.groups}
    groups = []
    for status, snapshot in triggerer.manager.snapshots():
        stats = status.producer.partition_stats()
        paused_for = status.producer.paused_partitions()
        partitions = []
        for view in snapshot.partitions:
            stat = stats.get((view.topic, view.partition))
            end = stat.end if stat is not None and stat.end >= 0 else None
            partitions.append({
                **asdict(view),
                "committed": stat.committed if stat is not None and stat.committed >= 0
                else None,
                "end": end,
                "lag": max(0, end - view.floor) if end is not None and view.floor is not None
                else None,
                "paused": stat.paused if stat is not None else False,
                "paused_because": _reason(paused_for.get((view.topic, view.partition)))})
        health = status.producer.health()
        waited = health.waiting_for_partitions
        groups.append({
            "consumer_group": names.get(status.key, repr(status.key)),
            "waiting_for_partitions": None if waited is None else {
                "seconds": round(waited, 1), "session_timeout_s": health.session_timeout,
                "why": WAITING},
            "cohort": sorted(status.cohort), "present": sorted(status.present),
            "polling": status.polling, "paused": status.paused,
            "paused_because": status.paused_because, "lagging": dict(status.lagging),
            "in_flight": status.in_flight, "queued": status.queued,
            "received": status.counters.received, "redelivered": status.counters.redelivered,
            "unrouted": status.counters.unrouted, "matches": dict(status.matches),
            "partitions": partitions, "held": [asdict(h) for h in snapshot.held]})
    destinations = []
    if triggerer.delivery is not None:
        for state in triggerer.delivery.states():
            destinations.append({
                "id": state.id, "kind": state.kind, "holder": state.holder,
                "cursor": state.cursor, "lag_events": state.lag_events,
                "lag_seconds": state.lag_seconds, "delivered": state.delivered,
                "undeliverable": state.undeliverable, "failing": state.failing_since is not None,
                "last_error": state.last_error, "failures": dict(state.failures)})
    heartbeat = triggerer.heartbeat
    return {"version": __version__,
            "process": None if heartbeat is None else heartbeat.row | {"id": heartbeat.id},
            "ready": not triggerer.readiness(), "not_ready": triggerer.readiness(),
            "groups": groups, "destinations": destinations}


def _reason(reason: PauseReason | None) -> str | None:
    return None if reason is None else reason.value


def status_from_thread(loop: asyncio.AbstractEventLoop, triggerer: TriggererView
                       ) -> dict[str, Any]:
    """:func:`status_document`, from another thread (the health server's)."""

    async def build() -> dict[str, Any]:
        return status_document(triggerer)

    return asyncio.run_coroutine_threadsafe(build(), loop).result(ANSWER_WITHIN_S)
