"""A counting HTTP proxy in front of the real schema registry, which can play a restart.

Why a stand-in for one behaviour: Karapace answers **404** for schema ids it knows for
about a second after a restart, while it reloads its schemas topic (issue 41 §2).
The registry the tests run, Apicurio Registry, keeps its schemas in a database and
answers nothing before its storage is up, so it never shows that window however it is
restarted. Everything else goes through to Apicurio itself: the proxy forwards each
request as it is and returns Apicurio's answer, so schemas, ids and errors are the
real registry's. Two settings change answers: while ``reloading`` is set, a schema
lookup (``GET .../schemas/ids/<id>``) gets Karapace's 404 body (error code 40403), as
during its reload; ``fail_with`` answers every request with that HTTP status (404: a
registry that serves nothing, such as a url with a wrong base path; 503: one that is
down behind a load balancer). ``delay`` holds each schema lookup that long before it
is forwarded, so that concurrent askers overlap. Requests are counted, with their
times, per path, so tests count lookups instead of guessing them.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

SCHEMA_LOOKUP = "/schemas/ids/"


class RegistryProxy:
    """Forwards to ``upstream`` (a registry's Confluent API base url); :attr:`url` is its
    own base url (same path, another port)."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream_root = f"{parts.scheme}://{parts.netloc}"
        self.reloading = False
        self.fail_with: int | None = None
        self.delay = 0.0
        self.requests: dict[str, list[float]] = {}
        self._changed = threading.Condition()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def _answer(self) -> None:
                proxy._count(self.path)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = self.path.partition("?")[0]
                lookup = self.command == "GET" and SCHEMA_LOOKUP in path
                if proxy.fail_with is not None:
                    status = proxy.fail_with
                    self._send(status, json.dumps({"error_code": status, "message": "stand-in"}
                                                  ).encode(), "application/json")
                    return
                if proxy.reloading and lookup:
                    schema_id = path.rpartition("/")[2]
                    self._send(404, json.dumps({"error_code": 40403,
                                                "message": f"Schema {schema_id} not found"}
                                               ).encode(), "application/json")
                    return
                if lookup and proxy.delay:
                    time.sleep(proxy.delay)
                request = urllib.request.Request(
                    proxy.upstream_root + self.path, data=body or None, method=self.command,
                    headers={k: v for k, v in self.headers.items()
                             if k.lower() in ("content-type", "accept", "authorization")})
                try:
                    with urllib.request.urlopen(request, timeout=30) as answer:
                        self._send(answer.status, answer.read(),
                                   answer.headers.get("Content-Type"))
                except urllib.error.HTTPError as error:
                    self._send(error.code, error.read(), error.headers.get("Content-Type"))

            def _send(self, status: int, body: bytes, content_type: str | None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type or "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{port}{parts.path}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _count(self, path: str) -> None:
        with self._changed:
            self.requests.setdefault(path.partition("?")[0], []).append(time.monotonic())
            self._changed.notify_all()

    def lookups(self, schema_id: int) -> list[float]:
        """When ``GET .../schemas/ids/<schema_id>`` was asked (monotonic seconds)."""
        with self._changed:
            return self._lookups(schema_id)

    def count(self, suffix: str) -> int:
        """How many requests had a path ending with ``suffix``."""
        with self._changed:
            return sum(len(t) for path, t in self.requests.items() if path.endswith(suffix))

    def wait_lookups(self, schema_id: int, count: int, timeout: float = 60.0) -> None:
        """Block until the id was looked up ``count`` times (fails after ``timeout``)."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self._lookups(schema_id)) >= count,
                                          timeout):
                raise AssertionError(f"schema id {schema_id} looked up "
                                     f"{len(self._lookups(schema_id))} times, not {count}")

    def _lookups(self, schema_id: int) -> list[float]:
        return [t for path, times in self.requests.items()
                if path.endswith(f"{SCHEMA_LOOKUP}{schema_id}") for t in times]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def registry_proxy(upstream: str) -> Iterator[RegistryProxy]:
    proxy = RegistryProxy(upstream)
    try:
        yield proxy
    finally:
        proxy.close()
