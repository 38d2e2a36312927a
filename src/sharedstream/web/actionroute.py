"""The one order every console action is checked in: token, role, audit, then the request.

The guard (``app.py``) has authenticated the request and put in its state the name of
the operate token it carries as ``Bearer`` (:data:`OPERATOR`) and the name of any token
that reads (:data:`READER`). :class:`ActionRoute` then runs, for every
``POST /api/v1/actions/...``, before FastAPI reads the body into its model:

1. the role: no token at all is 401 and names nobody, so it is not recorded; a token
   that only reads is 403, recorded under that token's name;
2. then FastAPI validates the body (400) and the action checks what it asks (an unknown
   dead-letter topic is 404, a time it cannot use 400) and the state of things (409):
   each refusal is recorded under the operate token's name, a preview's too.

So a refusal is always in the audit, whatever was wrong with the request, and a read
token learns nothing about what it asked for (it is refused before anything is looked
up). The target recorded is read from the body as sent, before validation, so that a
body the model refuses is recorded too; an action that runs records its own outcome
(``ops.audited``) and raises :class:`Recorded` for a refusal already written. A preview
that runs changes nothing and is not recorded.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

from sharedstream.core.text import storable_text
from sharedstream.ops import actions as ops
from sharedstream.statestore.store import StateStore
from sharedstream.web.params import validation_detail
from sharedstream.web.settings import ConsoleSettings

OPERATOR = "sharedstream_operator"  # request state: the operate token's name, or None
READER = "sharedstream_reader"  # request state: the name of the token that reads, or None
ACTOR = "sharedstream_actor"  # request state: who acts, once the role is checked
TARGET = "sharedstream_target"  # request state: what on, as the audit records it
TARGET_CHARS = 500
Body = Mapping[str, Any]


class Recorded(HTTPException):
    """A refusal the action's own audit (``ops.audited``) has recorded already."""


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """An action endpoint: its audit name, and what it acts on, from its body as sent
    (any field may be missing or of another type: the model has not checked it yet)."""

    action: str
    target: Callable[[Body], str]


def field(body: Body, name: str) -> str:
    """``body[name]`` as text for a target: ``?`` when missing, JSON when not a string."""
    value = body.get(name)
    if value is None:
        return "?"
    return value if isinstance(value, str) else json.dumps(value)


def items(body: Body, name: str) -> list[str]:
    value = body.get(name)
    return [field({"v": v}, "v") for v in value] if isinstance(value, list) else []


def loose_json(raw: bytes) -> Body:
    """The body as a JSON object, or empty (not JSON, or not an object)."""
    try:
        found = json.loads(raw)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def action_route(store: StateStore, settings: ConsoleSettings,
                 specs: Mapping[str, ActionSpec]) -> type[APIRoute]:
    """The route class of the actions router; ``specs`` by endpoint name (a route
    without one, the audit list, is an ordinary read)."""

    async def record(actor: str, spec: ActionSpec, target: str, detail: str) -> None:
        await asyncio.to_thread(ops.record, store, actor, spec.action, target, False,
                                f"refused: {detail}")

    async def role(request: Request, spec: ActionSpec, target: str) -> str:
        """``console:<name>`` of the operate token, or the refusal (recorded once a token
        was given)."""
        state = request.scope.get("state", {})
        name = state.get(OPERATOR)
        if name is not None:
            return f"console:{name}"
        reader = state.get(READER)
        if not settings.operate_tokens:
            detail = ("this console has no operate token, so it does not act: set [web] "
                      "operate_tokens (or SHAREDSTREAM__WEB__OPERATE_TOKENS) and restart it")
        elif reader is None:
            raise HTTPException(401, "this action needs an operate token, as "
                                     "Authorization: Bearer <token>")
        else:
            detail = ("this action needs the operate role: send an operate token as "
                      "Authorization: Bearer <token> (this one only reads)")
        if reader is not None:
            await record(f"console:{reader}", spec, target, "the read role cannot act")
        raise HTTPException(403, detail)

    class ActionRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handle = super().get_route_handler()
            spec = specs.get(self.name)
            if spec is None:
                return handle

            async def checked(request: Request) -> Response:
                body = loose_json(await request.body())  # cached: FastAPI reads it again
                target = storable_text(spec.target(body), TARGET_CHARS)
                if body.get("dry_run") is True:
                    target += " (dry run)"
                actor = await role(request, spec, target)
                request.scope["state"].update({ACTOR: actor, TARGET: target})
                try:
                    return await handle(request)
                except Recorded:
                    raise
                except RequestValidationError as exc:
                    await record(actor, spec, target, validation_detail(exc))
                    raise
                except HTTPException as exc:
                    if exc.status_code < 500:
                        await record(actor, spec, target, str(exc.detail))
                    raise

            return checked

    return ActionRoute


def who(request: Request) -> tuple[str, str]:
    """``(actor, target)`` of an action request, as :class:`ActionRoute` found them."""
    state = request.scope["state"]
    return state[ACTOR], state[TARGET]
