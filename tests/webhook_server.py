"""A real HTTP server for the webhook destination's tests (a thread, loopback only).

Every request is recorded (headers, body, the answer given). ``answer`` decides the
status per request; ``hold`` blocks the answer to requests it matches until
``release()``: a test kills the sender while a request is in flight.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True, slots=True)
class Received:
    headers: dict[str, str]
    body: bytes
    status: int

    @property
    def document(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed


class WebhookServer:
    def __init__(self, answer: Callable[[dict[str, Any], int], int] | None = None) -> None:
        """``answer(document, n)`` -> status, ``n`` counting requests from 1."""
        self.answer = answer or (lambda _doc, _n: 200)
        self.received: list[Received] = []
        self.hold: Callable[[dict[str, Any]], bool] = lambda _doc: False
        self.holding = threading.Event()  # a held request is waiting
        self._release = threading.Event()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                document = json.loads(body)
                if server.hold(document):
                    server.holding.set()
                    server._release.wait()
                with server._lock:
                    status = server.answer(document, len(server.received) + 1)
                    server.received.append(Received(dict(self.headers), body, status))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}/hook"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    def __enter__(self) -> WebhookServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._http.shutdown()
        self._http.server_close()

    def release(self) -> None:
        self._release.set()

    def acked(self) -> list[Received]:
        with self._lock:
            return [r for r in self.received if 200 <= r.status < 300]
