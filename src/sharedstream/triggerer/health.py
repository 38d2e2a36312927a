"""``/livez``, ``/readyz``, ``/metrics`` and ``/status`` on a loopback port.

The server runs on its own daemon thread (standard library ``ThreadingHTTPServer``)
so a scrape never waits on the event loop and a busy loop never makes the
process look dead to an orchestrator. Readiness is computed on each request by a
callable the triggerer supplies; it returns the list of reasons the process is
not ready (empty list = ready), which ``/readyz`` prints so an operator sees why.

The address is bound when the server is built, and :func:`check_port` binds and
releases it the same way, so the start of ``run`` refuses a port in use (a
:class:`HealthPortError`, exit 2) before anything is written. Between that check and
the real bind another process may still take the port: the bind then fails with the
same error. ``check`` binds nothing (:func:`probe_port`): run beside a running
triggerer, whose health server holds the port, it only says that something listens
there.
"""

from __future__ import annotations

import errno
import json
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from sharedstream.triggerer.settings_loader import ConfigError

ReadinessCheck = Callable[[], Sequence[str]]
StatusDocument = Callable[[], Mapping[str, Any]]


class HealthPortError(ConfigError):
    """``[triggerer] health_host``/``health_port`` cannot be listened on. A configuration
    error (exit 2): the operator frees the port or chooses another."""


def check_port(host: str, port: int) -> str:
    """Bind ``host:port`` as :class:`HealthServer` does, release it, and say so."""
    if port == 0:
        return f"health server: {host}, any free port"
    _bind(host, port, BaseHTTPRequestHandler).server_close()
    return f"health server: {host}:{port} is free"


def probe_port(host: str, port: int, timeout: float = 0.5) -> str:
    """What ``check`` says of the health server's address, binding nothing: whether
    something listens there now (a running triggerer, usually). A host that does not
    resolve is the same :class:`HealthPortError` the bind of ``run`` raises."""
    if port == 0:
        return f"health server: {host}, any free port"
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise HealthPortError(
            f"health server: {host} does not resolve ({exc.strerror or exc}): set "
            "[triggerer] health_host to an address of this machine") from None
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError:
        return f"health server: {host}:{port}, nothing listens there now"
    return (f"health server: {host}:{port} is in use now (a running triggerer's, say): "
            "a second `run` on this machine needs another [triggerer] health_port")


def _bind(host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    try:
        return ThreadingHTTPServer((host, port), handler)
    except OSError as exc:  # socket.gaierror too: a health_host that does not resolve
        if exc.errno == errno.EADDRINUSE:
            problem = f"{host}:{port} is in use (another process listens on it)"
        else:
            problem = f"cannot listen on {host}:{port} ({exc.strerror or exc})"
        raise HealthPortError(
            f"health server: {problem}: stop that process, or set [triggerer] health_port "
            "to a free port (0 picks one, -1 turns the server off) or health_host to an "
            "address of this machine") from None


class HealthServer:
    """Serves liveness, readiness and Prometheus metrics until :meth:`stop`."""

    def __init__(
        self,
        registry: CollectorRegistry,
        readiness: ReadinessCheck,
        host: str = "127.0.0.1",
        port: int = 0,
        status: StatusDocument | None = None,
    ) -> None:
        self._registry = registry
        self._readiness = readiness
        self._status = status
        self._server = _bind(host, port, self._handler_class())
        self._server.daemon_threads = True
        # shutdown() waits for the serving loop's next poll: 0.1 s, not the default 0.5 s,
        # keeps every stop (and each process's exit) short for one wake-up per 0.1 s idle.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
            name="sharedstream-health", daemon=True,
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        registry = self._registry
        readiness = self._readiness
        status = self._status

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/livez":
                    self._reply(HTTPStatus.OK, b"ok\n", "text/plain; charset=utf-8")
                elif path in ("/readyz", "/healthz"):
                    try:
                        reasons = list(readiness())
                    except Exception as exc:
                        reasons = [f"readiness check failed: {type(exc).__name__}"]
                    if reasons:
                        body = "".join(f"not ready: {r}\n" for r in reasons).encode()
                        self._reply(HTTPStatus.SERVICE_UNAVAILABLE, body, "text/plain")
                    else:
                        self._reply(HTTPStatus.OK, b"ready\n", "text/plain; charset=utf-8")
                elif path == "/metrics":
                    self._reply(HTTPStatus.OK, generate_latest(registry), CONTENT_TYPE_LATEST)
                elif path == "/status" and status is not None:
                    try:
                        body = json.dumps(status(), default=str).encode()
                    except Exception as exc:  # a busy loop, or the process stopping
                        self._reply(HTTPStatus.SERVICE_UNAVAILABLE,
                                    f"status unavailable: {type(exc).__name__}\n".encode(),
                                    "text/plain")
                    else:
                        self._reply(HTTPStatus.OK, body, "application/json")
                else:
                    self._reply(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

            def _reply(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                """Scrapes every few seconds would drown the triggerer's log."""

        return Handler
