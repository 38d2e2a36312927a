"""A reverse proxy in front of a real Airflow API server that records every request.

The destination under test is configured with ``proxy.url`` as its ``base_url``: each
request is forwarded to Airflow as is and recorded (method, path, query, the status
Airflow answered), so a test counts the listings a process made and what Airflow said.
``hold(match)`` blocks the first request ``match`` accepts until ``release()``; it is then
forwarded even if its client is gone (a process killed while the request was in flight).
``release(until_status=500)`` asks Airflow that held request again until Airflow answers
it with that status, and hands the client that answer (``caught`` is set then): Airflow
3.3.2's 500 on the events listing lasts tens of milliseconds, too short to meet by chance.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

Match = Callable[[str, str, dict[str, list[str]]], bool]  # (method, path, query) -> hold
LISTING = "/api/v2/assets/events"


@dataclass(frozen=True, slots=True)
class Forwarded:
    method: str
    path: str
    query: dict[str, list[str]]
    status: int

    @property
    def identity_lookup(self) -> bool:
        """A listing of one asset's events: the destination's "posted before?" check."""
        return self.method == "GET" and self.path == LISTING and "asset_id" in self.query


class RecordingProxy:
    def __init__(self, target: str) -> None:
        self.records: list[Forwarded] = []
        self.holding = threading.Event()
        self.caught = threading.Event()
        self._until_status: int | None = None
        self._match: Match | None = None
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._stopped = False
        proxy = self
        upstream = httpx.Client(base_url=target, timeout=30)
        self._upstream = upstream

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                parts = urlsplit(self.path)
                query = parse_qs(parts.query)
                with proxy._lock:
                    match, proxy._match = proxy._match, None
                    held = match is not None and match(self.command, parts.path, query)
                    if not held:
                        proxy._match = match
                if held:
                    proxy.holding.set()
                    proxy._release.wait()
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "content-length", "connection")}
                answer = upstream.request(self.command, self.path, content=body,
                                          headers=headers)
                while held and proxy._until_status is not None and not proxy._stopped:
                    if answer.status_code == proxy._until_status:
                        proxy.caught.set()
                        break
                    answer = upstream.request(self.command, self.path, content=body,
                                              headers=headers)
                with proxy._lock:
                    proxy.records.append(Forwarded(self.command, parts.path, query,
                                                   answer.status_code))
                try:
                    self.send_response(answer.status_code)
                    self.send_header("Content-Type",
                                     answer.headers.get("content-type", "application/json"))
                    self.send_header("Content-Length", str(len(answer.content)))
                    self.end_headers()
                    self.wfile.write(answer.content)
                except OSError:
                    pass  # the client was killed while its request was held

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _forward

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped = True
        self._release.set()
        self._http.shutdown()
        self._http.server_close()
        self._upstream.close()

    def hold(self, match: Match) -> None:
        """Hold the next request ``match`` accepts, until :meth:`release`."""
        with self._lock:
            self.holding.clear()
            self._release.clear()
            self._until_status = None
            self._match = match

    def release(self, *, until_status: int | None = None) -> None:
        self._until_status = until_status
        self._release.set()

    def forwarded(self) -> list[Forwarded]:
        with self._lock:
            return list(self.records)
