"""What the console tests import: the seeded group's name, the markup planted in every field,
the canned ``/status`` document and the server answering it, and what the ``seeded``
fixture yields. Here, not in this directory's conftest: every conftest is the module
``conftest``, and when several test directories are named in one run another directory's
may be the one a ``from conftest import`` finds."""

from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sharedstream.statestore.store import StateStore

GROUP = "sharedstream.orders"
MARKUP = "<script>document.title='pwned'</script>"


def status_document(process_id: str) -> dict[str, Any]:
    """What a triggerer's ``/status`` answers (see triggerer/status.py), canned."""
    partitions = [{"topic": "orders", "partition": p, "base": 0, "floor": 10 + p,
                   "position": 20, "remembered": 0, "held": 1 if p == 0 else 0,
                   "open_bytes": 100, "fetch": "open", "committed": 10 + p, "end": 25,
                   "lag": 15 - p, "paused": False} for p in range(2)]
    return {
        "version": "0.1.0", "process": {"id": process_id}, "ready": False,
        "not_ready": ["group sharedstream.orders: a watcher is not subscribed"],
        "groups": [{"consumer_group": GROUP, "cohort": ["audit", "paid"],
                    "present": ["audit", "paid"], "polling": True, "paused": False,
                    "in_flight": 3, "queued": 0, "received": 40, "redelivered": 2,
                    "unrouted": 0, "matches": {"paid": {"value": {"status": ["paid"]}}},
                    "partitions": partitions,
                    "held": [{"topic": "orders", "partition": 0, "offset": 10,
                              "reasons": {"paid": f"ValueError: {MARKUP}"},
                              "attempts": {"paid": 2}, "rounds": 2, "retry_in": 0.5}]}],
        "destinations": [{"id": "hooks", "kind": "webhook", "holder": True, "cursor": 1,
                          "lag_events": 4, "lag_seconds": 1.5, "delivered": 1,
                          "undeliverable": 1, "failing": True,
                          "last_error": "HTTP 503 from the receiver", "failures": {}}]}


class StatusServer:
    """A canned ``GET /status`` on a free loopback port (``host``: which loopback address),
    counting the requests it got; ``sized=False`` leaves out ``Content-Length`` (the
    body ends when the connection closes)."""

    def __init__(self, document: dict[str, Any] | bytes, *, host: str = "127.0.0.1",
                 sized: bool = True) -> None:
        body = document if isinstance(document, bytes) else json.dumps(document).encode()
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.requests += 1
                self.send_response(200 if self.path == "/status" else 404)
                self.send_header("Content-Type", "application/json")
                if sized:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                # The console may stop reading (a body over its cap).
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self.server.server_address[1]}/status"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()



@dataclass
class Seeded:
    url: str
    store: StateStore
    live_id: str
    stale_id: str
    dlq_topic: str
    bootstrap: str
    event_ids: list[int]
