"""One timestamp format in every command's output and in the console, pages and API
alike (issue 43): ISO 8601 in UTC, to the second, with ``Z``.

Printed to the second, a time pasted into a ``--since`` starts at or before the thing it
was copied from, never after it."""

from __future__ import annotations

import re
import typing
from datetime import UTC, datetime, timedelta, timezone

from pydantic import BaseModel

from sharedstream.ops.clitools import json_line, stamp
from sharedstream.web import actions, schemas
from sharedstream.web.pages import when

SECONDS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
MOMENT = datetime(2026, 12, 6, 10, 0, 5, 987654, tzinfo=UTC)


def test_the_commands_print_seconds_in_utc() -> None:
    assert stamp(MOMENT) == "2026-12-06T10:00:05Z"
    assert stamp(MOMENT.astimezone(timezone(timedelta(hours=2)))) == "2026-12-06T10:00:05Z"
    assert stamp(MOMENT.replace(tzinfo=None)) == "2026-12-06T10:00:05Z"  # naive means UTC
    assert json_line({"at": MOMENT}) == '{"at": "2026-12-06T10:00:05Z"}'


def test_the_console_pages_print_what_the_commands_print() -> None:
    assert when(MOMENT) == stamp(MOMENT)


def is_time(annotation: object) -> bool:
    """``datetime``, alone, annotated, or in a union (``Stamp | None``)."""
    return annotation is datetime or any(is_time(a) for a in typing.get_args(annotation))


def datetime_fields(model: type[BaseModel]) -> list[str]:
    return [name for name, field in model.model_fields.items() if is_time(field.annotation)]


def test_every_time_the_api_answers_is_printed_to_the_second() -> None:
    models = [m for module in (schemas, actions) for m in vars(module).values()
              if isinstance(m, type) and issubclass(m, BaseModel) and datetime_fields(m)]
    assert {schemas.EventOut, schemas.AssetOut, actions.AuditEntry} <= set(models)
    for model in models:
        for name in datetime_fields(model):
            dumped = model.model_construct(**{name: MOMENT}).model_dump(
                mode="json", include={name})[name]
            assert SECONDS.match(dumped), f"{model.__name__}.{name}: {dumped}"
