"""``kind = "airflow"``: each event becomes an asset event on an Airflow 3 API server.

``POST /api/v2/assets/events`` with the Airflow asset's id; ``extra`` carries the
event's payload (``payload``) and its identity (``sharedstream_event``), and, for an
event persisted while tracing was on, the W3C ``traceparent`` of its delivery span
(outside the identity, which must not change between two tries). DAGs scheduled
on that asset then run. The client is the bridge's (token auth, rate limit, the same
failure classes): unavailable is transient, any other refusal permanent; an asset
Airflow does not know is permanent ("unknown asset"), once per event.

Never a second DAG run for one event: when events may have been posted before (the
first batch after this process took the destination over, or the event whose answer
was lost), the sender lists the events of their assets since they were created, once
per asset and before posting any of them, and posts only those whose identity is not
there. The window left: two processes posting the same event at once, which the
destination's lease rules out except across a lease expiry (see delivery.cursor).

Airflow 3.3.2 answers that listing 500 while a run created by one of the listed events
is queued and not started (its response model wants the run's start date): a moment
within a scheduler loop after each post, tens of milliseconds on an idle scheduler,
seconds to minutes on a loaded one. So a 500 there is asked again, with a short
backoff, for up to ``LOOKUP_PATIENCE_S`` (two minutes, not counted as a failure); only
a listing still failing then ends the round (a transient failure, ``lookup_http_500``:
the cursor holds and the events wait, never posted unchecked). Listing once per batch,
before its posts, also keeps this sender's own posts from queueing the runs its next
check would trip on.

Airflow merges events posted faster than its scheduler loop into one asset-triggered
run (apache/airflow#56050); ``pace_seconds`` spaces events of one asset for users who
need a run per event.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import httpx

from sharedstream import tracing
from sharedstream.airflowbridge.client import (
    AirflowClient,
    AirflowRequestError,
    AirflowUnavailableError,
)
from sharedstream.airflowbridge.settings import AirflowInstanceSettings
from sharedstream.core.backoff import Backoff
from sharedstream.delivery.errors import PermanentDeliveryError, TransientDeliveryError
from sharedstream.delivery.sender import Results
from sharedstream.delivery.settings import AirflowDestination
from sharedstream.statestore.events import EventRecord
from sharedstream.tracing import deliveryspans

IDENTITY_KEY = "sharedstream_event"
# How far before an event's creation its Airflow twin may be stamped (clock skew).
CHECK_SLACK = timedelta(minutes=5)
# How long a listing answered 500 is asked again before the round gives up: several
# scheduler loops, far less than an outage worth reporting.
LOOKUP_PATIENCE_S = 120.0

log = logging.getLogger(__name__)


def airflow_extra(event: EventRecord) -> dict[str, Any]:
    o = event.origin
    return {"payload": event.payload,
            IDENTITY_KEY: {"identity": event.identity, "id": event.id, "asset": event.asset,
                           "watcher": event.watcher, "topic": o.topic,
                           "partition": o.partition, "offset": o.offset}}


class AirflowSender:
    def __init__(self, options: AirflowDestination, instance: AirflowInstanceSettings, *,
                 transport: httpx.AsyncBaseTransport | None = None,
                 clock: Any = time.monotonic) -> None:
        self._options = options
        self._client = AirflowClient(options.instance, instance, transport=transport)
        self._clock = clock
        self._posted_at: dict[int, float] = {}  # Airflow asset id -> last post (pacing)

    async def send(self, events: Sequence[EventRecord], *, maybe_sent: bool) -> Results:
        try:
            posted = await self._posted_before(events) if maybe_sent else set()
        except AirflowUnavailableError as exc:
            kind = "lookup_http_500" if exc.status == 500 else "unavailable"
            return [TransientDeliveryError(f"{exc} (checking for events posted before)", kind)]
        results: Results = []
        for event in events:
            try:
                if _mark(airflow_extra(event)[IDENTITY_KEY]) not in posted:
                    await self._post(event)
            except AirflowUnavailableError as exc:
                results.append(TransientDeliveryError(str(exc), "unavailable"))
                break
            except AirflowRequestError as exc:
                results.append(PermanentDeliveryError(str(exc), f"http_{exc.status}"))
            except PermanentDeliveryError as exc:
                results.append(exc)
            else:
                results.append(None)
        return results

    async def _posted_before(self, events: Sequence[EventRecord]) -> set[str]:
        """The identities among ``events`` that Airflow already has, one listing per asset
        (from its oldest event's creation, less the clock slack). An asset Airflow does not
        know is left to the post, which refuses its events one by one."""
        oldest: dict[int, EventRecord] = {}
        for event in events:
            try:
                asset_id = await self._asset_id(event)
            except (PermanentDeliveryError, AirflowRequestError):
                continue
            if asset_id not in oldest or event.created_at < oldest[asset_id].created_at:
                oldest[asset_id] = event
        found: set[str] = set()
        for asset_id, event in oldest.items():
            marks = await self._marks(asset_id, event)
            found.update(_mark(m) for m in marks)
        return found

    async def _marks(self, asset_id: int, oldest: EventRecord) -> list[Any]:
        """The listing, asked again while it answers 500 (see the module docstring)."""
        backoff = Backoff(0.2, 2.0)
        give_up = self._clock() + LOOKUP_PATIENCE_S
        while True:
            try:
                return await self._client.marks_since(asset_id, IDENTITY_KEY,
                                                      oldest.created_at - CHECK_SLACK)
            except AirflowUnavailableError as exc:
                if exc.status != 500 or self._clock() >= give_up:
                    raise
                delay = backoff.next()
                log.info("%s; a run of a listed event is likely still queued: asking again "
                         "in %.2fs", exc, delay)
                await asyncio.sleep(delay)

    async def _post(self, event: EventRecord) -> None:
        if tracing.tracer is not None and event.trace_context is not None:
            with deliveryspans.delivering(event.trace_context, "airflow", event.id,
                                    {"sharedstream.airflow.instance": self._options.instance,
                                     "sharedstream.asset": event.asset}) as carrier:
                await self._post_extra(event, carrier)
        else:
            await self._post_extra(event, {})

    async def _post_extra(self, event: EventRecord, carrier: dict[str, str]) -> None:
        asset_id = await self._asset_id(event)
        await self._pace(asset_id)
        await self._client.create_asset_event(asset_id, {**airflow_extra(event), **carrier})
        self._posted_at[asset_id] = self._clock()

    async def _asset_id(self, event: EventRecord) -> int:
        options = self._options
        target = options.asset_map.get(event.asset)
        if options.match == "uri":
            uri = target or event.asset_uri
            if uri is None:
                raise PermanentDeliveryError(
                    f"asset {event.asset!r} has no uri to find it in Airflow by", "no_uri")
            asset_id = await self._client.resolve_asset(None, uri)
        else:
            asset_id = await self._client.resolve_asset(target or event.asset, None)
        if asset_id is None:
            wanted = target or (event.asset_uri if options.match == "uri" else event.asset)
            raise PermanentDeliveryError(
                f"unknown asset: Airflow {options.instance!r} has no asset with "
                f"{options.match} {wanted!r}", "unknown_asset")
        return asset_id

    async def _pace(self, asset_id: int) -> None:
        last = self._posted_at.get(asset_id)
        if last is not None and self._options.pace_seconds:
            wait = last + self._options.pace_seconds - self._clock()
            if wait > 0:
                await asyncio.sleep(wait)

    async def aclose(self) -> None:
        await self._client.aclose()


def _mark(marker: Any) -> str:
    """An identity marker as a comparable key (the whole marker: an event stored again
    under a new id after ``events clean`` is delivered again, as documented)."""
    return json.dumps(marker, sort_keys=True, default=str)
