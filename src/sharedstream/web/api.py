"""``/api/v1``: the console's REST API, read-only, versioned, paginated.

Lists take ``limit``/``offset`` (``total`` says how many match), except events, whose
pages go by id (``before``, answered as ``next_before``): new events never shift a
page. Times (``since``, ``until``) are ISO-8601 (naive = UTC) or a duration ago
(``10m``, ``2h``, ``7d``). Unknown names are 404, unparsable or out-of-range
parameters 400 (``params.py`` has the bounds; ``app.py`` turns FastAPI's validation
errors into that 400), a database that does not answer 503; every error body is
``{"detail": "<one sentence>"}``.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Query

from sharedstream.statestore.scopes import TaskScope as Scope
from sharedstream.web import params, schemas
from sharedstream.web.params import instant
from sharedstream.web.sources import NotFound, Sources, paginate

# Text the database can store: PostgreSQL refuses NUL in text, so no filter may carry one.
TEXT = r"^[^\x00]*$"
Limit = Annotated[int, Query(ge=params.LIMIT.low, le=params.LIMIT.high,
                             description="At most this many items.")]
Offset = Annotated[int, Query(ge=params.SKIP.low, le=params.SKIP.high,
                              description="Skip this many items.")]
Partition = Annotated[int | None, Query(ge=params.PARTITION.low, le=params.PARTITION.high)]
Since = Annotated[str | None, Query(description="ISO-8601 (naive = UTC) or a duration ago "
                                                "(10m, 2h, 7d).", max_length=64,
                                                pattern=TEXT)]
Name = Annotated[str | None, Query(max_length=250, pattern=TEXT)]
ProcessId = Annotated[str, Path(min_length=1, max_length=64, pattern=TEXT)]
GroupName = Annotated[str, Path(min_length=1, max_length=500, pattern=TEXT)]
AssetName = Annotated[str, Path(min_length=1, max_length=250, pattern=TEXT)]

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": schemas.Problem, "description": "A filter could not be parsed."},
    401: {"model": schemas.Problem, "description": "The console's token is required."},
    404: {"model": schemas.Problem, "description": "No such item."},
    503: {"model": schemas.Problem, "description": "The database does not answer."},
}


def build_router(sources: Sources) -> APIRouter:
    router = APIRouter(responses=ERRORS)

    async def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from None

    @router.get("/overview", response_model=schemas.Overview, tags=["overview"])
    async def overview() -> dict[str, Any]:
        """Every triggerer, group and destination with its health, and counts."""
        return await sources.overview()

    @router.get("/triggerers", response_model=schemas.Page[schemas.TriggererOut],
                tags=["triggerers"])
    async def triggerers(state: Literal["all", "alive", "stale"] = "all",
                         limit: Limit = 100, offset: Offset = 0) -> dict[str, Any]:
        """The ``sharedstream run`` processes from their heartbeat rows; alive ones with
        their ``/status`` readiness (a row not seen for 30 s is stale: the process is gone)."""
        return paginate(await sources.triggerers(state), limit, offset)

    @router.get("/triggerers/{triggerer_id}", response_model=schemas.TriggererDetail,
                tags=["triggerers"])
    async def triggerer(triggerer_id: ProcessId) -> dict[str, Any]:
        """One triggerer, with its whole ``/status`` document."""
        try:
            return await sources.triggerer(triggerer_id)
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from None

    @router.get("/groups", response_model=schemas.Page[schemas.GroupSummary], tags=["groups"])
    async def groups(limit: Limit = 100, offset: Offset = 0) -> dict[str, Any]:
        """Consumer groups: recorded by the triggerers (``stream_group``) or live."""
        return paginate(await sources.groups(), limit, offset)

    @router.get("/groups/{consumer_group:path}/lag", response_model=schemas.GroupLag,
                tags=["groups"])
    async def group_lag(consumer_group: GroupName) -> dict[str, Any]:
        """The lag samples the console kept (up to an hour), per partition."""
        try:
            return await sources.lag(consumer_group)
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from None

    @router.get("/groups/{consumer_group:path}", response_model=schemas.GroupDetail,
                tags=["groups"])
    async def group(consumer_group: GroupName) -> dict[str, Any]:
        """One group: members, partitions with their lag (live from the owner's floor, or
        from the committed offsets and log end as ``offsets show`` computes them), held
        messages with their reasons."""
        try:
            return await sources.group(consumer_group)
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from None

    @router.get("/watchers", response_model=schemas.Page[schemas.Watcher], tags=["groups"])
    async def watchers(group: Name = None,
                       q: Annotated[str | None, Query(max_length=250, pattern=TEXT,
                                                      description="Part of the watcher's "
                                                                  "name, any case.")] = None,
                       limit: Limit = 100, offset: Offset = 0) -> dict[str, Any]:
        """Watchers per group, by name then group, whether a live triggerer runs them, held
        and rejected counts."""
        return await sources.watchers(group, q, limit=limit, offset=offset)

    @router.get("/held", response_model=schemas.Page[schemas.HeldMessageOut], tags=["groups"])
    async def held(group: Name = None, watcher: Name = None, topic: Name = None,
                   partition: Partition = None,
                   q: Annotated[str | None, Query(max_length=250, pattern=TEXT,
                                                  description="Part of the topic or of a "
                                                              "watcher's name, any case.")]
                   = None, limit: Limit = 100, offset: Offset = 0) -> dict[str, Any]:
        """Messages held for redelivery in the live triggerers, with who failed them and why,
        by group, topic, partition and offset."""
        found = await sources.held(group=group, watcher=watcher, topic=topic,
                                   partition=partition, q=q)
        return paginate(found, limit, offset)

    @router.get("/assets", response_model=schemas.Page[schemas.AssetOut], tags=["assets"])
    async def assets(q: Annotated[str | None, Query(max_length=250, pattern=TEXT,
                                                    description="Part of a name or uri, "
                                                                "any case.")]
                     = None, active: bool | None = None, limit: Limit = 100,
                     offset: Offset = 0) -> dict[str, Any]:
        """Assets, by name, with their newest event."""
        result: dict[str, Any] = await call(sources.db.assets_sync, q=q, active=active,
                                            limit=limit, offset=offset)
        return result

    @router.get("/assets/{name:path}", response_model=schemas.AssetDetail, tags=["assets"])
    async def asset(name: AssetName) -> dict[str, Any]:
        """One asset and its asset state (the watchers' cursors and watermarks)."""
        result: dict[str, Any] = await call(sources.db.asset_sync, name)
        return result

    @router.get("/events", response_model=schemas.EventPage, tags=["assets"])
    async def events(asset: Name = None, watcher: Name = None, topic: Name = None,
                     partition: Partition = None,
                     message_offset: Annotated[int | None, Query(
                         ge=params.MESSAGE_OFFSET.low, le=params.MESSAGE_OFFSET.high,
                         description="The source message's offset.")] = None,
                     since: Since = None, until: Since = None,
                     before: Annotated[int | None, Query(
                         ge=params.EVENT_ID.low, le=params.EVENT_ID.high,
                         description="Only ids below.")] = None,
                     limit: Limit = 50) -> dict[str, Any]:
        """Asset events, newest first, by asset, watcher, time and source coordinates."""
        result: dict[str, Any] = await call(
            sources.db.events_sync, asset_name=asset, watcher=watcher, topic=topic,
            partition=partition, message_offset=message_offset,
            since=instant(since, "since"), until=instant(until, "until"), before=before,
            limit=limit)
        return result

    @router.get("/events/{event_id}", response_model=schemas.EventOut, tags=["assets"])
    async def event(event_id: Annotated[int, Path(ge=params.EVENT_ID.low,
                                                  le=params.EVENT_ID.high)]
                    ) -> dict[str, Any]:
        """One event by id."""
        result: dict[str, Any] = await call(sources.db.event_sync, event_id)
        return result

    @router.get("/state/assets/{name:path}", response_model=list[schemas.StateEntryOut],
                tags=["state"])
    async def asset_state(name: AssetName) -> list[dict[str, Any]]:
        """Every key of one asset's state, with its value."""
        result: list[dict[str, Any]] = await call(sources.db.asset_state_sync, name)
        return result

    @router.get("/state/tasks", response_model=schemas.Page[schemas.TaskScopeOut],
                tags=["state"])
    async def task_scopes(dag_id: Name = None, run_id: Name = None, task_id: Name = None,
                          limit: Limit = 100, offset: Offset = 0) -> dict[str, Any]:
        """Task-state scopes (dag, run, task, map index), newest write first."""
        result: dict[str, Any] = await call(sources.db.task_scopes_sync, dag_id=dag_id,
                                            run_id=run_id, task_id=task_id, limit=limit,
                                            offset=offset)
        return result

    @router.get("/state/task", response_model=list[schemas.StateEntryOut], tags=["state"])
    async def task_state(dag_id: Annotated[str, Query(min_length=1, max_length=128,
                                                      pattern=TEXT)],
                         run_id: Annotated[str, Query(min_length=1, max_length=250,
                                                      pattern=TEXT)],
                         task_id: Annotated[str, Query(min_length=1, max_length=128,
                                                       pattern=TEXT)],
                         map_index: Annotated[int, Query(ge=params.MAP_INDEX.low,
                                                         le=params.MAP_INDEX.high)] = -1
                         ) -> list[dict[str, Any]]:
        """Every unexpired key of one task-state scope, with its value."""
        result: list[dict[str, Any]] = await call(
            sources.db.task_state_sync, Scope(dag_id, run_id, task_id, map_index))
        return result

    @router.get("/rejected", response_model=schemas.Page[schemas.Rejected],
                tags=["rejections"])
    async def rejected(watcher: Name = None,
                       reason: Annotated[str | None, Query(
                           max_length=250, pattern=TEXT,
                           description="Part of the reason.")] = None,
                       topic: Name = None, limit: Limit = 100,
                       offset: Offset = 0) -> dict[str, Any]:
        """Rejections recorded in the database (no dead-letter topic, or one that refused
        the record), newest first."""
        result: dict[str, Any] = await call(sources.db.rejected_sync, watcher=watcher,
                                            reason=reason, topic=topic, limit=limit,
                                            offset=offset)
        return result

    @router.get("/rejected/stats", response_model=schemas.RejectedStats, tags=["rejections"])
    async def rejected_stats() -> dict[str, Any]:
        """Recorded rejections grouped by watcher, by reason, and by both."""
        result: dict[str, Any] = await call(sources.db.rejected_stats_sync)
        return result

    @router.get("/dead-letters/topics", response_model=list[str], tags=["rejections"])
    async def dead_letter_topics() -> list[str]:
        """The dead-letter topics this console reads (``--dlq-topic``)."""
        return list(sources.settings.dlq_topics)

    @router.get("/dead-letters", response_model=schemas.DeadLetterPage, tags=["rejections"])
    async def dead_letters(topic: Annotated[str, Query(min_length=1, max_length=250,
                                                       pattern=TEXT)],
                           since: Since = None, watcher: Name = None,
                           reason: Annotated[str | None, Query(
                               max_length=250, description="Part of a reason.")] = None,
                           q: Annotated[str | None, Query(
                               max_length=250, description="Text in a reason, the key or "
                                                           "the value (any case).")] = None,
                           limit: Limit = 100, offset: Offset = 0) -> dict[str, Any]:
        """A dead-letter topic's records (newest first, copies of one rejection as one),
        with histograms of reasons and watchers (as ``dlq inspect --stats``)."""
        result: dict[str, Any] = await call(
            sources.dlq.dead_letters_sync, topic=topic, since=instant(since, "since"),
            watcher=watcher, reason=reason, text=q or None, limit=limit, offset=offset)
        return result

    @router.get("/destinations", response_model=list[schemas.Destination],
                tags=["destinations"])
    async def destinations() -> list[dict[str, Any]]:
        """Destinations: stored cursor, lag in events (and seconds, from the process
        delivering), failures, undeliverable events."""
        return await sources.destinations()

    @router.get("/undelivered", response_model=schemas.Page[schemas.UndeliveredOut],
                tags=["destinations"])
    async def undelivered(destination: Name = None, limit: Limit = 100,
                          offset: Offset = 0) -> dict[str, Any]:
        """Events a destination refused for good, with the reason, oldest first."""
        result: dict[str, Any] = await call(sources.db.undelivered_sync,
                                            destination=destination, limit=limit,
                                            offset=offset)
        return result

    return router
