"""A small async client for the parts of Airflow 3's REST API the bridge uses.

Authentication: ``POST /auth/token`` with username/password (the simple and the
FAB auth managers both answer it) gives a JWT, cached and fetched again once when
a request answers 401; a configured static ``token`` is used as is.

Failure classes matter more than anything else here, because they decide whether
a Kafka message is retried or dead-lettered:

* :class:`AirflowUnavailableError` (connection refused, timeout, 5xx, 429, auth
  still refused after a fresh token): the instance cannot answer now. It is an
  :class:`~sharedstream.core.streamconfig.InfrastructureError`, so a sink
  message is held and redelivered with backoff forever, never dead-lettered.
* :class:`AirflowRequestError` (any other 4xx): the request itself is wrong for this
  instance (asset missing, payload refused); retrying cannot help.

Secrets never appear in an exception or log line: errors carry the instance name,
the method, the path and the status, never headers or the token response.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from sharedstream.airflowbridge.envelope import parse_timestamp
from sharedstream.airflowbridge.ratelimit import TokenBucket
from sharedstream.airflowbridge.settings import AirflowInstanceSettings
from sharedstream.core.streamconfig import InfrastructureError

log = logging.getLogger(__name__)

PAGE_SIZE = 100  # Airflow's default [api] maximum_page_limit
_BODY_EXCERPT = 300
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


class AirflowUnavailableError(InfrastructureError):
    """The instance cannot answer now (network, 5xx, 429, authentication).

    ``status`` is the HTTP status it answered, None when it did not answer at all.
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class AirflowRequestError(Exception):
    """The instance refused the request itself (a 4xx other than 401/429)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def cursor_of(event: dict[str, Any]) -> list[int]:
    """The position of an event in the API's order: ``[timestamp in µs, id]``.

    ``GET /api/v2/assets/events`` in Airflow 3 can be ordered by ``timestamp`` (ties
    broken by id) but neither ordered nor filtered by id, so the publisher's cursor
    is this pair, which is what the listing's order is, and ``advance`` orders lists
    element-wise.
    """
    micros = (parse_timestamp(str(event["timestamp"])) - _EPOCH) // _MICROSECOND
    return [micros, int(event["id"])]


def _instant(micros: int) -> str:
    return (_EPOCH + micros * _MICROSECOND).isoformat()


class AirflowClient:
    """One instance: token cache, rate limit, asset-id cache."""

    def __init__(self, name: str, settings: AirflowInstanceSettings, *,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.name = name
        self.settings = settings
        self._http = httpx.AsyncClient(base_url=settings.base_url.rstrip("/"),
                                       timeout=settings.request_timeout, transport=transport)
        self._bucket = TokenBucket(settings.max_requests_per_second, settings.burst)
        self._token: str | None = settings.token
        self._asset_ids: dict[tuple[str | None, str | None], int] = {}

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- transport ---------------------------------------------------------------

    async def _login(self) -> str:
        await self._bucket.acquire()
        try:
            response = await self._http.post("/auth/token", json={
                "username": self.settings.username, "password": self.settings.password})
        except httpx.HTTPError as exc:
            raise AirflowUnavailableError(
                f"airflow {self.name!r}: token request failed: {type(exc).__name__}") from None
        if response.status_code not in (200, 201):
            raise AirflowUnavailableError(
                f"airflow {self.name!r}: token request answered {response.status_code}")
        token = response.json().get("access_token")
        if not isinstance(token, str):
            raise AirflowUnavailableError(f"airflow {self.name!r}: no access_token in answer")
        return token

    async def request(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                      json: Any = None) -> httpx.Response:
        """One API call; 2xx returned, other answers raised as the classes above."""
        for fresh in (False, True):
            if self._token is None:
                self._token = await self._login()
            await self._bucket.acquire()
            try:
                response = await self._http.request(
                    method, path, params=params, json=json,
                    headers={"Authorization": f"Bearer {self._token}"})
            except httpx.HTTPError as exc:
                raise AirflowUnavailableError(
                    f"airflow {self.name!r}: {method} {path} failed: "
                    f"{type(exc).__name__}: {exc}") from None
            if response.status_code == 401 and not fresh and self.settings.token is None:
                self._token = None  # expired: one fresh token, then give up
                continue
            break
        status = response.status_code
        if 200 <= status < 300:
            return response
        where = f"airflow {self.name!r}: {method} {path} answered {status}"
        if status in (401, 403, 408, 429) or status >= 500:
            raise AirflowUnavailableError(where, status)
        raise AirflowRequestError(f"{where}: {response.text[:_BODY_EXCERPT]}", status)

    # -- asset events ------------------------------------------------------------

    async def events_after(self, cursor: list[int] | None, limit: int) -> list[dict[str, Any]]:
        """Up to ``limit`` events strictly after ``cursor``, in the API's (timestamp, id) order.

        Pages with ``timestamp_gte`` = the cursor's instant and skips what is not after
        the cursor on this side (events sharing the cursor's timestamp). An event
        committed later with an *earlier* timestamp than the cursor is not seen: see
        docs/airflow-sync.md (guarantees and failure windows) for when that can happen.
        """
        found: list[dict[str, Any]] = []
        offset = 0
        params: dict[str, Any] = {"order_by": "timestamp", "limit": PAGE_SIZE}
        if cursor is not None:
            params["timestamp_gte"] = _instant(cursor[0])
        while len(found) < limit:
            params["offset"] = offset
            page = (await self.request("GET", "/api/v2/assets/events", params=params)).json()
            items: list[dict[str, Any]] = page.get("asset_events", [])
            found.extend(e for e in items if cursor is None or cursor_of(e) > cursor)
            if len(items) < PAGE_SIZE:
                break
            offset += len(items)
        return found[:limit]

    async def resolve_asset(self, name: str | None, uri: str | None, *,
                            refresh: bool = False) -> int | None:
        """The id of the asset with this name and/or uri (whichever are given) in this
        instance; None if absent. Answers are cached; ``refresh`` asks again."""
        if name is None and uri is None:
            raise ValueError("resolve_asset needs a name or a uri")
        key = (name, uri)
        if not refresh and key in self._asset_ids:
            return self._asset_ids[key]
        search = {"uri_pattern": uri} if uri is not None else {"name_pattern": name}
        offset = 0
        while True:
            page = (await self.request("GET", "/api/v2/assets", params={
                **search, "limit": PAGE_SIZE, "offset": offset})).json()
            items: list[dict[str, Any]] = page.get("assets", [])
            for asset in items:
                if (uri is None or asset.get("uri") == uri) and (
                        name is None or asset.get("name") == name):
                    self._asset_ids[key] = int(asset["id"])
                    return self._asset_ids[key]
            if len(items) < PAGE_SIZE:
                self._asset_ids.pop(key, None)
                return None
            offset += len(items)

    async def _asset_events_since(self, asset_id: int, since: datetime
                                  ) -> AsyncIterator[list[dict[str, Any]]]:
        """Pages of the events of ``asset_id`` from ``since`` on, newest first."""
        offset = 0
        while True:
            page = (await self.request("GET", "/api/v2/assets/events", params={
                "asset_id": asset_id, "timestamp_gte": since.isoformat(),
                "order_by": "-timestamp", "limit": PAGE_SIZE, "offset": offset})).json()
            items: list[dict[str, Any]] = page.get("asset_events", [])
            yield items
            if len(items) < PAGE_SIZE:
                return
            offset += len(items)

    async def has_marked_event(self, asset_id: int, key: str, marker: Any,
                               since: datetime) -> bool:
        """Whether an event of ``asset_id`` whose ``extra[key]`` is ``marker`` exists from
        ``since`` on: how a writer finds out whether an earlier attempt already posted."""
        async for items in self._asset_events_since(asset_id, since):
            if any((e.get("extra") or {}).get(key) == marker for e in items):
                return True
        return False

    async def marks_since(self, asset_id: int, key: str, since: datetime) -> list[Any]:
        """Every ``extra[key]`` of the events of ``asset_id`` from ``since`` on (events
        without one left out): what a writer checks a whole batch against at once."""
        found: list[Any] = []
        async for items in self._asset_events_since(asset_id, since):
            found.extend(extra[key] for e in items
                         if key in (extra := e.get("extra") or {}))
        return found

    async def create_asset_event(self, asset_id: int, extra: dict[str, Any]) -> dict[str, Any]:
        response = await self.request("POST", "/api/v2/assets/events",
                                      json={"asset_id": asset_id, "extra": extra})
        created: dict[str, Any] = response.json()
        return created
