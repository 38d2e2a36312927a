"""``kind = "airflow"``: each event becomes an asset event on an Airflow 3 API server.

``POST /api/v2/assets/events`` with the Airflow asset's id; ``extra`` carries the
event's payload (``payload``) and its identity (``sharedstream_event``). DAGs scheduled
on that asset then run. The client is the bridge's (token auth, rate limit, the same
failure classes): unavailable is transient, any other refusal permanent; an asset
Airflow does not know is permanent ("unknown asset"), once per event.

Never a second DAG run for one event: when an event may have been posted before (the
first round after this process took the destination over, or a retry after an answer
was lost), the deliverer asks Airflow for an event of that asset carrying the identity
before posting. The window left: two processes posting the same event at once, which
the destination's lease rules out except across a lease expiry (see delivery.cursor).

Airflow merges events posted faster than its scheduler loop into one asset-triggered
run (apache/airflow#56050); ``pace_seconds`` spaces events of one asset for users who
need a run per event.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import httpx

from sharedstream.airflowbridge.client import (
    AirflowClient,
    AirflowRequestError,
    AirflowUnavailableError,
)
from sharedstream.airflowbridge.settings import AirflowInstanceSettings
from sharedstream.delivery.errors import PermanentDeliveryError, TransientDeliveryError
from sharedstream.delivery.sender import Results
from sharedstream.delivery.settings import AirflowDestination
from sharedstream.statestore.events import EventRecord

IDENTITY_KEY = "sharedstream_event"
# How far before an event's creation its Airflow twin may be stamped (clock skew).
CHECK_SLACK = timedelta(minutes=5)


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
        results: Results = []
        for event in events:
            try:
                await self._deliver(event, maybe_sent)
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

    async def _deliver(self, event: EventRecord, maybe_sent: bool) -> None:
        asset_id = await self._asset_id(event)
        extra = airflow_extra(event)
        if maybe_sent and await self._client.has_marked_event(
                asset_id, IDENTITY_KEY, extra[IDENTITY_KEY], event.created_at - CHECK_SLACK):
            return
        await self._pace(asset_id)
        await self._client.create_asset_event(asset_id, extra)
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
