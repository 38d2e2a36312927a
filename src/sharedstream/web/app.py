"""The console's ASGI app: the API, the pages, the static files, and the guard before them.

:class:`Guard` sits in front of everything (the OpenAPI document and static files
included). With a token it answers 401 to any request without it; without a token
(loopback only, see ``settings.py``) it refuses a ``Host`` that is not loopback. It
also stamps every answer with headers that keep a page from running anything but the
console's own script: a strict Content-Security-Policy (no inline script, no inline
style, nothing from another origin), ``nosniff``, no framing, no referrer, no caching.

There is no Swagger UI page: FastAPI's loads its script from a CDN into this
authenticated origin and starts with an inline script, which that policy forbids. The
OpenAPI document is served; any OpenAPI viewer or client generator reads it.

Errors keep one shape, ``{"detail": "<one sentence>"}`` (pages: the sentence in a
page): a parameter that does not parse or is out of range is 400, FastAPI's 422
validation errors included (their list would echo the input back); an unknown name
404; a database that does not answer 503.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import html
import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse, Response
from sqlalchemy.exc import SQLAlchemyError
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sharedstream import __version__
from sharedstream.statestore.engine import describe_error
from sharedstream.statestore.store import StateStore
from sharedstream.web.actionroute import OPERATOR, READER
from sharedstream.web.actions import build_action_pages, build_actions
from sharedstream.web.api import build_router
from sharedstream.web.pages import PageRenderer, build_pages
from sharedstream.web.params import BadParameter, validation_detail
from sharedstream.web.settings import ConsoleSettings, is_loopback
from sharedstream.web.sources import Sources

log = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
API = "/api/v1"
PAGE_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
            "frame-ancestors 'none'")
REALM = 'Basic realm="sharedstream console", charset="UTF-8"'


def token_matches(header: str | None, token: str) -> bool:
    """``Bearer <token>``, or basic auth whose password is the token (any user)."""
    if not header:
        return False
    scheme, _, value = header.partition(" ")
    value = value.strip()
    given: str | None = None
    if scheme.lower() == "bearer":
        given = value
    elif scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return False
        given = decoded.partition(":")[2]
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8"))


def bearer_name(header: str | None, tokens: Mapping[str, str]) -> str | None:
    """The name of the operate token ``header`` carries as ``Bearer`` (never basic: see
    ``settings.py``), or None. Every token is compared, in constant time each."""
    scheme, _, value = (header or "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    given = value.strip().encode("utf-8")
    found = None
    for name, secret in tokens.items():
        if hmac.compare_digest(given, secret.encode("utf-8")):
            found = name
    return found


def host_name(host_header: str) -> str:
    """The name of a ``Host`` header, without its port (``[::1]:80`` -> ``::1``)."""
    if host_header.startswith("["):
        return host_header[1:].partition("]")[0]
    return host_header.rpartition(":")[0] if host_header.count(":") == 1 else host_header


class Guard:
    """Authentication (or the loopback ``Host`` check) and the security headers."""

    def __init__(self, app: ASGIApp, settings: ConsoleSettings) -> None:
        self.app = app
        self.token = settings.token
        self.operate = dict(settings.operate_tokens)
        self.trusted = {h.lower() for h in settings.trusted_hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        path = str(scope.get("path", ""))

        async def stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = [(b"content-security-policy", PAGE_CSP.encode()),
                         (b"x-content-type-options", b"nosniff"),
                         (b"x-frame-options", b"DENY"),
                         (b"referrer-policy", b"no-referrer"),
                         (b"cache-control", b"no-store")]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        authorization = headers.get("authorization")
        operator = bearer_name(authorization, self.operate)
        # Who the request is, for the actions (actions.py): the operate role or not.
        scope.setdefault("state", {})[OPERATOR] = operator
        read = operator or next((name for name, secret in self.operate.items()
                                 if token_matches(authorization, secret)), None) or (
            "read" if self.token is not None and token_matches(authorization, self.token)
            else None)
        scope["state"][READER] = read  # the name of the token that reads, or None
        if self.token is not None:
            if not read:
                await self._refuse(401, "authentication required: the console's token, as "
                                        "a bearer token or the basic-auth password",
                                   path, stamped, challenge=True)
                return
        elif not read:
            name = host_name(headers.get("host", "")).lower()
            if not (is_loopback(name) or name in self.trusted):
                await self._refuse(400, "this console (no token) answers only to loopback "
                                        "host names", path, stamped)
                return
        await self.app(scope, receive, stamped)

    @staticmethod
    async def _refuse(status: int, detail: str, path: str, send: Send, *,
                      challenge: bool = False) -> None:
        if path.startswith(API):
            body = json.dumps({"detail": detail}).encode()
            content_type = b"application/json"
        else:
            body = f"<!doctype html><title>{status}</title><p>{html.escape(detail)}</p>".encode()
            content_type = b"text/html; charset=utf-8"
        headers = [(b"content-type", content_type),
                   (b"content-length", str(len(body)).encode())]
        if challenge:
            headers.append((b"www-authenticate", REALM.encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def sample_forever(sources: Sources, interval: float) -> None:
    """Fetch the triggerers' status every ``interval`` seconds: the lag history goes on
    while nobody polls."""
    while True:
        try:
            await sources.snapshot(max_age=interval / 2)
        except Exception as exc:  # a sample missed; the next one may work
            log.debug("lag sample failed: %r", exc)
        await asyncio.sleep(interval)


def create_app(settings: ConsoleSettings, store: StateStore, *, sampler: bool = True) -> FastAPI:
    """The console over ``store``'s database; ``sampler`` runs the background lag sampler."""
    sources = Sources(settings, store)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        task = (asyncio.create_task(sample_forever(sources, settings.sample_interval))
                if sampler else None)
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
            sources.close()

    app = FastAPI(title="sharedstream console", version=__version__,
                  description="The sharedstream triggerers: processes, groups, lag, held "
                              "messages, assets, events, state, rejections, dead letters "
                              "and destinations; actions (retry, replay, reset, forget) "
                              "with an operate token, and their audit.",
                  openapi_url=f"{API}/openapi.json", docs_url=None, redoc_url=None,
                  lifespan=lifespan)
    app.state.sources = sources
    app.include_router(build_router(sources), prefix=API)
    app.include_router(build_actions(sources), prefix=API)
    app.include_router(build_pages(sources, settings))
    app.include_router(build_action_pages(sources, settings))
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    render = PageRenderer(settings)

    @app.exception_handler(BadParameter)
    async def bad_parameter(request: Request, exc: BadParameter) -> Response:
        if request.url.path.startswith(API):
            return JSONResponse({"detail": str(exc)}, status_code=400)
        return render(request, "problem.html", {"heading": "Bad request", "what": str(exc)},
                      status=400, live=False)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        return JSONResponse({"detail": validation_detail(exc)}, status_code=400)

    @app.exception_handler(SQLAlchemyError)
    async def database_down(request: Request, exc: SQLAlchemyError) -> Response:
        detail = f"database: {describe_error(exc)}"
        if request.url.path.startswith(API):
            return JSONResponse({"detail": detail}, status_code=503)
        return HTMLResponse(f"<!doctype html><title>503</title><p>{html.escape(detail)}</p>",
                            status_code=503)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version,
                                 description=app.description, routes=app.routes)
            if settings.token is not None:
                schema.setdefault("components", {})["securitySchemes"] = {
                    "bearer": {"type": "http", "scheme": "bearer"},
                    "basic": {"type": "http", "scheme": "basic",
                              "description": "Any user name; the token as password."}}
                schema["security"] = [{"bearer": []}, {"basic": []}]
            for operations in schema["paths"].values():  # 422 is answered 400 (above)
                for operation in operations.values():
                    operation["responses"].pop("422", None)
            for name in ("HTTPValidationError", "ValidationError"):
                schema.get("components", {}).get("schemas", {}).pop(name, None)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.add_middleware(Guard, settings=settings)
    return app
