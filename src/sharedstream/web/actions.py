"""The console's actions (``POST /api/v1/actions/...``), its audit (``GET /api/v1/audit``)
and the Actions page (``/actions``).

Each action runs the function of ``ops/actions.py`` its CLI command runs, so the two
cannot disagree, and each is audited there. Who may act is decided server-side, on every
request, before anything the request asks is looked at (``actionroute.py``: token, role,
audit, then the request; every refusal from the role on is recorded). Bodies are
validated like the API's parameters; every error is ``{"detail": "<one sentence>"}``:
a refusal by the state of things (a live member, a live triggerer, a message nobody
holds) or a Kafka failure is 409.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field

from sharedstream.kafka.connections import ConnectionConfigError, resolve_connection
from sharedstream.ops import actions as ops
from sharedstream.ops.clitools import CommandError
from sharedstream.ops.dlq.reader import DeadLetterError
from sharedstream.ops.dlq.replay import ReplaySummary
from sharedstream.ops.offsets import ResetChange, parse_reset_target
from sharedstream.statestore.types import utcnow
from sharedstream.web import params, schemas
from sharedstream.web.actionroute import ActionSpec, Recorded, action_route, field, items, who
from sharedstream.web.api import ERRORS
from sharedstream.web.pages import PageRenderer
from sharedstream.web.params import instant
from sharedstream.web.settings import ConsoleSettings
from sharedstream.web.sources import Sources

T = TypeVar("T")
TEXT = r"^[^\x00]*$"
Text = Annotated[str, Field(min_length=1, max_length=250, pattern=TEXT)]
GroupText = Annotated[str, Field(min_length=1, max_length=500, pattern=TEXT)]
PartitionInt = Annotated[int, Field(ge=params.PARTITION.low, le=params.PARTITION.high)]
OffsetInt = Annotated[int, Field(ge=params.MESSAGE_OFFSET.low, le=params.MESSAGE_OFFSET.high)]


class HeldRetry(BaseModel):
    consumer_group: GroupText
    topic: Text
    partition: PartitionInt
    offset: OffsetInt


class DlqReplay(BaseModel):
    topic: Text
    watchers: list[Text] = Field(default_factory=list, max_length=50)
    reasons: list[Text] = Field(default_factory=list, max_length=50)
    group: GroupText | None = Field(
        None, description="The consumer group holding the replay's position; default "
                          "sharedstream-dlq-replay.<topic>.")
    from_start: bool = Field(
        False, description="Read the topic from its start, not from where the group "
                           "stopped: replays records a replay already took, again.")
    dry_run: bool = False


class OffsetsReset(BaseModel):
    consumer_group: GroupText
    to: Annotated[str, Field(min_length=1, max_length=64, pattern=TEXT,
                             description="earliest, latest, or a time (ISO-8601, naive = "
                                         "UTC; or a duration ago such as 2h)")]
    dry_run: bool = False


class TriggererForget(BaseModel):
    triggerer_id: Annotated[str, Field(min_length=1, max_length=64, pattern=TEXT)]


class Outcome(BaseModel):
    result: str
    dry_run: bool = False
    detail: dict[str, Any] | None = None


class AuditEntry(BaseModel):
    id: int
    at: schemas.Stamp
    actor: str
    action: str
    target: str
    ok: bool
    result: str


class AuditPage(BaseModel):
    items: list[AuditEntry]
    total: int
    limit: int
    offset: int


def held_target(body: Mapping[str, Any]) -> str:
    return (f"{field(body, 'consumer_group')} {field(body, 'topic')}"
            f"[{field(body, 'partition')}]@{field(body, 'offset')}")


def replay_target(body: Mapping[str, Any]) -> str:
    group = body.get("group")
    return ops.replay_target(field(body, "topic"), watchers=items(body, "watchers"),
                             reasons=items(body, "reasons"),
                             group=None if group is None else field(body, "group"),
                             from_start=body.get("from_start") is True)


def reset_target(body: Mapping[str, Any]) -> str:
    return f"{field(body, 'consumer_group')} --to {field(body, 'to')}"


# By endpoint name: what each action is called in the audit, and what it acts on.
SPECS = {"held_retry": ActionSpec(ops.HELD_RETRY, held_target),
         "dlq_replay": ActionSpec(ops.DLQ_REPLAY, replay_target),
         "offsets_reset": ActionSpec(ops.OFFSETS_RESET, reset_target),
         "triggerer_forget": ActionSpec(ops.TRIGGERER_FORGET,
                                        lambda body: field(body, "triggerer_id"))}


def build_actions(sources: Sources) -> APIRouter:
    store = sources.store
    settings = sources.settings
    router = APIRouter(tags=["actions"], route_class=action_route(store, settings, SPECS),
                       responses={
        **ERRORS,
        403: {"model": schemas.Problem, "description": "The operate role is required."},
        409: {"model": schemas.Problem,
              "description": "Refused by the state of things, or Kafka failed."}})

    async def act(request: Request, run: Callable[[], T],
                  describe: Callable[[T], str] = str) -> T:
        """``run()`` as the request's action, recorded with its outcome."""
        actor, target = who(request)
        action = SPECS[request.scope["route"].name].action
        try:
            return await asyncio.to_thread(ops.audited, store, actor, action, target, run,
                                           describe)
        except (CommandError, DeadLetterError) as exc:
            raise Recorded(409, str(exc)) from None

    async def preview(run: Callable[[], T]) -> T:
        try:
            return await asyncio.to_thread(run)
        except (CommandError, DeadLetterError) as exc:
            raise HTTPException(409, str(exc)) from None

    def connection(connection_id: str | None) -> Any:
        try:
            return resolve_connection(connection_id or settings.connection,
                                      settings.connections)
        except ConnectionConfigError as exc:
            raise HTTPException(409, str(exc)) from None

    @router.post("/actions/held-retry", response_model=Outcome)
    async def held_retry(request: Request, body: HeldRetry) -> dict[str, Any]:
        """Hand a held message out again now, through the live triggerer holding it (the
        request reaches it at its next heartbeat). 409 when no live triggerer holds it."""
        message = ops.HeldMessage(body.consumer_group, body.topic, body.partition, body.offset)
        holders = await held_by(sources, message)
        line = await act(request, lambda: ops.request_retry(store, message, holders))
        return {"result": line, "detail": {"triggerers": holders}}

    @router.post("/actions/dlq-replay", response_model=Outcome)
    async def dlq_replay(request: Request, body: DlqReplay) -> dict[str, Any]:
        """``dlq replay TOPIC --watcher ... --reason ... [--group G] [--from-start]``;
        ``dry_run`` decides and counts what the replay would take, producing and committing
        nothing (the page shows it before it asks to confirm). 404 for a topic not given
        with --dlq-topic."""
        if body.topic not in settings.dlq_topics:
            raise HTTPException(404, "not a dead-letter topic of this console (--dlq-topic)")

        def run() -> ReplaySummary:
            return ops.replay_dead_letters(connection(None), body.topic,
                                           watchers=body.watchers, reasons=body.reasons,
                                           group=body.group, from_start=body.from_start,
                                           dry_run=body.dry_run,
                                           timeout=settings.kafka_timeout)

        summary = await (preview(run) if body.dry_run else act(request, run, ops.replay_line))
        return {"result": ops.replay_line(summary), "dry_run": body.dry_run,
                "detail": summary.as_dict()}

    @router.post("/actions/offsets-reset", response_model=Outcome)
    async def offsets_reset(request: Request, body: OffsetsReset) -> dict[str, Any]:
        """``offsets reset --group G --to T``, refused while the group has a live member;
        ``dry_run`` shows the change (the preview), making none."""
        try:
            target = parse_reset_target(body.to, utcnow())
        except ValueError as exc:
            raise HTTPException(400, f"to: {exc}") from None
        recorded = (await asyncio.to_thread(sources.db.stream_groups_sync)
                    ).get(body.consumer_group) or {}
        kafka = connection(recorded.get("connection"))

        def run() -> list[ResetChange]:
            return ops.reset_offsets(kafka, body.consumer_group, target,
                                     dry_run=body.dry_run, timeout=settings.kafka_timeout)

        changes = await (preview(run) if body.dry_run else act(request, run, ops.reset_line))
        line = ops.reset_line(changes)
        return {"result": f"would {line}" if body.dry_run else line, "dry_run": body.dry_run,
                "detail": {"partitions": [asdict(c) for c in changes]}}

    @router.post("/actions/triggerer-forget", response_model=Outcome)
    async def triggerer_forget(request: Request, body: TriggererForget) -> dict[str, Any]:
        """Remove a stale triggerer's row (refused for a live one)."""
        line = await act(request, lambda: ops.forget_triggerer(store, body.triggerer_id))
        return {"result": line}

    @router.get("/audit", response_model=AuditPage, tags=["audit"])
    async def audit(limit: Annotated[int, Query(ge=params.LIMIT.low, le=params.LIMIT.high)]
                    = 100,
                    offset: Annotated[int, Query(ge=params.SKIP.low, le=params.SKIP.high)]
                    = 0,
                    since: Annotated[str | None, Query(max_length=64, pattern=TEXT)] = None
                    ) -> dict[str, Any]:
        """Every action done or refused, newest first (as ``sharedstream audit list``)."""
        items, total = await asyncio.to_thread(ops.audit_list, store, limit=limit,
                                               offset=offset, since=instant(since, "since"))
        return {"items": items, "total": total, "limit": limit, "offset": offset}

    return router


async def held_by(sources: Sources, message: ops.HeldMessage) -> list[str]:
    """The live triggerers whose ``/status`` lists ``message`` as held, read afresh."""
    await sources.snapshot(max_age=0)
    found = await sources.held(group=message.consumer_group, topic=message.topic,
                               partition=message.partition)
    return sorted({str(h["triggerer"]) for h in found if h["offset"] == message.offset})


def build_action_pages(sources: Sources, settings: ConsoleSettings) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    render = PageRenderer(settings)

    @router.get("/actions", response_class=HTMLResponse)
    async def actions_page(request: Request) -> HTMLResponse:
        held, stale, groups = await asyncio.gather(
            sources.held(), sources.triggerers("stale"), sources.groups())
        audit, total = await asyncio.to_thread(ops.audit_list, sources.store, limit=50)
        return render(request, "actions.html", {
            "held": held, "stale": stale, "groups": groups, "audit": audit,
            "audit_total": total, "dlq_topics": settings.dlq_topics,
            "can_act": bool(settings.operate_tokens)})

    return router
