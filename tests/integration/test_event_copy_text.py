"""The unit-of-work writer's ``COPY`` text, built by hand (uow/eventcopy.py, issue 28).

The writer formats a large batch's rows in ``COPY``'s text format itself instead of
through psycopg's ``write_row``: every field that holds a backslash, a tab or a line
break must be escaped, or the server splits the row, refuses it, or stores other text.
Payloads that hold each of them (as JSON escapes, and raw inside a key name) are stored
as the values emitted, by ``COPY`` (seen in the statements sent), with their coordinates
(``jsonb`` keeps the value, not the text: its spacing is its own, issue 43).
"""

from __future__ import annotations

import json

from sqlalchemy import select
from test_event_copy import forms_sent
from uow_windows import WindowDriver, coordinates

from sharedstream.statestore import StateStore
from sharedstream.statestore.models import asset_event
from sharedstream.uow.eventcopy import COPY_MIN_ROWS
from sharedstream.uow.sink import DatabaseWorkSink

AWKWARD = ["back\\slash", "tab\there", "line\nbreak", "cr\rhere", "\\N", "quote\"s",
           "üñí ☃", "\\\\two"]


async def test_copied_payloads_are_stored_as_emitted(
        postgres_store: StateStore) -> None:
    store = postgres_store
    sent = forms_sent(store)
    sink = DatabaseWorkSink(store, {"w": store.register_asset("orders")},
                            coordinates=coordinates)
    w = WindowDriver("w", sink)
    payloads = [{AWKWARD[n % len(AWKWARD)]: AWKWARD[n % len(AWKWARD)], "n": n}
                for n in range(COPY_MIN_ROWS)]
    windows = []
    for n, payload in enumerate(payloads):
        w.open(("orders", n % 3, n))
        w.emit(payload, None, [n, "\t"])
        windows.append(w.close(submit=False))
    sink.submit(windows)
    assert await sink.drain(30)
    await sink.aclose()

    assert sent == ["copy"]
    assert sink.figures.failures == 0 and sink.figures.permanent_failures == 0 and w.rejected == {}
    e = asset_event.c
    with store.engine.connect() as conn:
        stored = conn.execute(select(e.partition, e.offset, e.event_index, e.payload,
                                     e.topic, e.watcher).order_by(e.id)).all()
    expected = [(n % 3, n, index, event, "orders", "w")
                for n, payload in enumerate(payloads)
                for index, event in enumerate([payload, None, [n, "\t"]])]
    assert [(p, o, i, json.loads(text), t, w) for p, o, i, text, t, w in stored] == expected
