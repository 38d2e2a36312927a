"""The console's pages: server-rendered HTML over the same reads as the API.

Jinja2 with autoescaping on for every template: whatever came from a message, a
reason or a state value is shown as text, never interpreted. The only markup not
produced by a template is the SVG of ``charts.py``, which escapes its own text.
Each page's live part (``{% block live %}``) is re-rendered alone when asked with the
``X-Console-Fragment: 1`` header: ``static/console.js`` fetches it every two seconds.
Filters are query strings, so every view is a URL to share. A number in them outside
its bound (``params.py``) is a 400 page naming it; a time that does not parse is shown
above the page, which keeps its other filters.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from sharedstream import __version__
from sharedstream.statestore.durations import stamp
from sharedstream.statestore.scopes import TaskScope
from sharedstream.web.charts import color, lag_chart, timeline
from sharedstream.web.live import Snapshot, lag_source
from sharedstream.web.params import BadParameter, instant, page_int
from sharedstream.web.settings import ConsoleSettings
from sharedstream.web.sources import NotFound, Sources, paginate, window

TEMPLATES = Path(__file__).resolve().parent / "templates"
FRAGMENT_HEADER = "x-console-fragment"
PREVIEW_CHARS = 120
PAGE_SIZE = 50  # rows of the paged lists (watchers, held messages, assets)


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def compact(value: Any, width: int = PREVIEW_CHARS) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def when(value: datetime | None) -> str:
    """The one time format of the console, as of the CLI (``stamp``); ``-`` for none."""
    return "-" if value is None else stamp(value)


def from_ms(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    return when(datetime.fromtimestamp(ms / 1000, UTC))


def ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f}s ago"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(pretty=pretty, compact=compact, when=when, from_ms=from_ms, ago=ago)
    env.globals.update(version=__version__, color=color)
    return env


def _text(params: Mapping[str, str], name: str) -> str | None:
    value = params.get(name)
    if value is None:
        return None
    return value.replace("\x00", "").strip() or None


class PageRenderer:
    def __init__(self, settings: ConsoleSettings) -> None:
        self.env = environment()
        self.settings = settings

    def __call__(self, request: Request, name: str, context: dict[str, Any], *,
                 status: int = 200, live: bool = True) -> HTMLResponse:
        root = str(request.scope.get("root_path", ""))
        params = dict(request.query_params)

        def link(path: str | None = None, **changes: Any) -> str:
            merged = {**params, **{k: v for k, v in changes.items()}}
            query = urlencode({k: v for k, v in merged.items() if v not in (None, "")})
            here = f"{root}{quote(request.url.path, safe='/')}"
            return (path or here) + (f"?{query}" if query else "")

        values = {"root": root, "params": params, "link": link, "live": live,
                  "refresh_ms": self.settings.refresh_ms, "error": None, **context}
        template = self.env.get_template(name)
        if request.headers.get(FRAGMENT_HEADER) == "1" and "live" in template.blocks:
            body = "".join(template.blocks["live"](template.new_context(values)))
        else:
            body = template.render(values)
        return HTMLResponse(body, status_code=status, headers={"Vary": "X-Console-Fragment"})


def _instant(params: Mapping[str, str], name: str, errors: list[str]) -> datetime | None:
    try:
        return instant(_text(params, name), name)
    except BadParameter as exc:
        errors.append(str(exc))
        return None


def build_pages(sources: Sources, settings: ConsoleSettings) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    render = PageRenderer(settings)

    def missing(request: Request, what: str) -> HTMLResponse:
        return render(request, "problem.html", {"heading": "Not found", "what": what},
                      status=404, live=False)

    async def owners(snapshot: Snapshot | None = None) -> dict[str, dict[str, Any]]:
        """Each triggerer by id, for ``owner`` cells: its host and pid, linked to its page."""
        found = snapshot or await sources.snapshot()
        return {v.row["id"]: sources.triggerer_json(v) for v in found.processes}

    @router.get("/", response_class=HTMLResponse)
    async def overview(request: Request) -> HTMLResponse:
        found = await sources.overview()
        return render(request, "overview.html", {
            "overview": found, "owners": {t["id"]: t for t in found["triggerers"]}})

    @router.get("/triggerers/{triggerer_id}", response_class=HTMLResponse)
    async def triggerer(request: Request, triggerer_id: str) -> HTMLResponse:
        try:
            found = await sources.triggerer(triggerer_id.replace("\x00", ""))
        except NotFound as exc:
            return missing(request, str(exc))
        return render(request, "triggerer.html", {"t": found, "owners": await owners()})

    @router.get("/watchers", response_class=HTMLResponse)
    async def watchers(request: Request) -> HTMLResponse:
        params = request.query_params
        page = await sources.watchers(_text(params, "group"), _text(params, "q"),
                                      limit=PAGE_SIZE, offset=page_int(params, "offset") or 0)
        return render(request, "watchers.html", {"page": page})

    @router.get("/held", response_class=HTMLResponse)
    async def held(request: Request) -> HTMLResponse:
        params = request.query_params
        found = await sources.held(group=_text(params, "group"),
                                   watcher=_text(params, "watcher"),
                                   topic=_text(params, "topic"),
                                   partition=page_int(params, "partition"),
                                   q=_text(params, "q"))
        page = paginate(found, PAGE_SIZE, page_int(params, "offset") or 0)
        return render(request, "held.html", {
            "page": page, "owners": await owners(await sources.list_snapshot())})

    @router.get("/groups/{consumer_group:path}", response_class=HTMLResponse)
    async def group(request: Request, consumer_group: str) -> HTMLResponse:
        consumer_group = consumer_group.replace("\x00", "")
        try:
            detail = await sources.group(consumer_group)
        except NotFound as exc:
            return missing(request, str(exc))
        now = sources.clock()
        history = sources.history
        svg, lines = lag_chart(history.series(consumer_group, now), now, history.window_s,
                               history.sources(consumer_group))
        return render(request, "group.html", {
            "group": detail, "chart": svg, "lines": lines, "owners": await owners(),
            "chart_source": lag_source(line.source for line in lines if line.source)})

    @router.get("/assets", response_class=HTMLResponse)
    async def assets(request: Request) -> HTMLResponse:
        params = request.query_params
        active = {"yes": True, "no": False}.get(params.get("active", ""))
        offset = page_int(params, "offset") or 0
        page = await asyncio.to_thread(sources.db.assets_sync, q=_text(params, "q"),
                                       active=active, limit=PAGE_SIZE, offset=offset)
        return render(request, "assets.html", {"page": page})

    def _event_filters(params: Mapping[str, str], errors: list[str]) -> dict[str, Any]:
        return {"watcher": _text(params, "watcher"), "topic": _text(params, "topic"),
                "partition": page_int(params, "partition"),
                "message_offset": page_int(params, "message_offset"),
                "since": _instant(params, "since", errors),
                "until": _instant(params, "until", errors),
                "before": page_int(params, "before")}

    @router.get("/assets/{name:path}", response_class=HTMLResponse)
    async def asset(request: Request, name: str) -> HTMLResponse:
        name = name.replace("\x00", "")
        errors: list[str] = []
        filters = _event_filters(request.query_params, errors)
        try:
            detail = await asyncio.to_thread(sources.db.asset_sync, name)
        except NotFound as exc:
            return missing(request, str(exc))
        events = await asyncio.to_thread(sources.db.events_sync, asset_name=name, limit=50,
                                         **filters)
        start, end = window(filters["since"], filters["until"], timedelta(hours=1))
        if end <= start:
            errors.append("until must be after since")
            start, end = window(None, end, timedelta(hours=1))
        counts = await asyncio.to_thread(sources.db.timeline_sync, asset_name=name, since=start,
                                         until=end, watcher=filters["watcher"])
        step = (end - start) / len(counts)
        edges = [when(start + step * i) for i in range(len(counts) + 1)]
        return render(request, "asset.html", {
            "asset": detail, "events": events, "timeline": timeline(counts, edges),
            "window": (start, end), "error": "; ".join(errors) or None})

    @router.get("/events", response_class=HTMLResponse)
    async def events(request: Request) -> HTMLResponse:
        errors: list[str] = []
        filters = _event_filters(request.query_params, errors)
        page = await asyncio.to_thread(sources.db.events_sync,
                                       asset_name=_text(request.query_params, "asset"),
                                       limit=50, **filters)
        return render(request, "events.html", {"events": page,
                                               "error": "; ".join(errors) or None})

    @router.get("/dead-letters", response_class=HTMLResponse)
    async def dead_letters(request: Request) -> HTMLResponse:
        params = request.query_params
        errors: list[str] = []
        topics = list(settings.dlq_topics)
        topic = _text(params, "topic") or (topics[0] if topics else None)
        offset = page_int(params, "offset") or 0
        rejected_offset = page_int(params, "rejected_offset") or 0
        since = _instant(params, "since", errors)
        page = None
        if topic is not None:
            try:
                page = await asyncio.to_thread(
                    sources.dlq.dead_letters_sync, topic=topic, since=since,
                    watcher=_text(params, "watcher"), reason=_text(params, "reason"),
                    text=_text(params, "q"), limit=50, offset=offset)
            except NotFound as exc:
                errors.append(str(exc))
        stats = await asyncio.to_thread(sources.db.rejected_stats_sync)
        rejected = await asyncio.to_thread(
            sources.db.rejected_sync, watcher=_text(params, "watcher"),
            reason=_text(params, "reason"), topic=None, limit=50,
            offset=rejected_offset)
        return render(request, "dead_letters.html", {
            "topics": topics, "topic": topic, "page": page, "stats": stats,
            "rejected": rejected, "error": "; ".join(errors) or None})

    @router.get("/state", response_class=HTMLResponse)
    async def state(request: Request) -> HTMLResponse:
        params = request.query_params
        context: dict[str, Any] = {"entries": None, "scope": None}
        asset_name = _text(params, "asset")
        dag_id, run_id, task_id = (_text(params, k) for k in ("dag_id", "run_id", "task_id"))
        if asset_name is not None:
            try:
                context["entries"] = await asyncio.to_thread(sources.db.asset_state_sync,
                                                             asset_name)
                context["scope"] = f"asset {asset_name}"
            except NotFound as exc:
                context["error"] = str(exc)
        elif dag_id and run_id and task_id and params.get("map_index") is not None:
            index = page_int(params, "map_index")
            scope = TaskScope(dag_id, run_id, task_id, -1 if index is None else index)
            context["entries"] = await asyncio.to_thread(sources.db.task_state_sync, scope)
            context["scope"] = f"task {scope.label()}"
        context["assets"] = await asyncio.to_thread(
            sources.db.assets_sync, q=_text(params, "q"), active=None, limit=200, offset=0)
        context["tasks"] = await asyncio.to_thread(
            sources.db.task_scopes_sync, dag_id=dag_id, run_id=run_id, task_id=task_id,
            limit=50, offset=page_int(params, "offset") or 0)
        return render(request, "state.html", context)

    @router.get("/destinations", response_class=HTMLResponse)
    async def destinations(request: Request) -> HTMLResponse:
        params = request.query_params
        found = await sources.destinations()
        undelivered = await asyncio.to_thread(
            sources.db.undelivered_sync, destination=_text(params, "destination"), limit=50,
            offset=page_int(params, "offset") or 0)
        return render(request, "destinations.html", {"destinations": found,
                                                     "undelivered": undelivered})

    return router
