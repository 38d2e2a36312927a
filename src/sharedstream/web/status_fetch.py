"""Fetching a triggerer's ``GET /status``, whose address comes from the database.

Whoever can write ``triggerer_process`` chooses the ``status_url``, so the console
treats it as untrusted: it fetches plain ``http://`` only (what a triggerer's health
server serves), and only from an address inside ``[web] status_networks`` (loopback by
default). The name is resolved once and the connection goes to the address that was
checked: resolving again when connecting would let a name answer a second, different
address (DNS rebinding). No redirect is followed. The whole exchange must end within
the timeout (a server dripping bytes cannot hold a worker thread longer), and the
body is read in chunks and dropped as soon as it passes the size cap.

What comes back must be a status document as ``schemas.StatusDocument`` describes it;
only those fields are kept, so nothing else a server answers reaches a client. Every
failure is an ``OSError`` or ``ValueError`` with a one-line reason that never quotes
the body.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import socket
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from sharedstream.web.schemas import StatusDocument

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
STATUS_MAX_BYTES = 1024 * 1024
CHUNK_BYTES = 64 * 1024


def allowed_address(host: str, port: int, networks: Sequence[Network]) -> str:
    """The first address ``host`` resolves to that lies inside ``networks``."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise OSError(f"status unreachable: cannot resolve {host}") from None
    outside: ipaddress.IPv4Address | ipaddress.IPv6Address | None = None
    for *_, sockaddr in found:
        address = ipaddress.ip_address(str(sockaddr[0]))
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if any(address in network for network in networks):
            return str(address)
        outside = outside or address
    raise OSError(f"status not fetched: address not allowed ({outside} is outside "
                  "[web] status_networks)")


def _read_capped(reply: http.client.HTTPResponse, sock: socket.socket | None,
                 deadline: float) -> bytes:
    length = reply.getheader("Content-Length")
    if length is not None and length.isdigit() and int(length) > STATUS_MAX_BYTES:
        raise ValueError("status document larger than 1 MiB")
    body = bytearray()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        if sock is not None:
            sock.settimeout(remaining)
        chunk = reply.read1(CHUNK_BYTES)
        if not chunk:
            return bytes(body)
        body += chunk
        if len(body) > STATUS_MAX_BYTES:
            raise ValueError("status document larger than 1 MiB")


def fetch_body(url: str, networks: Sequence[Network], timeout: float) -> bytes:
    """The body of ``GET url`` (a 200), from an allowed address, within ``timeout``."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError("status not fetched: only http://host:port/ status URLs are "
                         "fetched")
    try:
        port = parts.port or 80
    except ValueError:
        raise ValueError("status not fetched: the status URL's port is not a port") from None
    deadline = time.monotonic() + timeout
    address = allowed_address(parts.hostname, port, networks)
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    connection = http.client.HTTPConnection(address, port, timeout=timeout)
    reply: http.client.HTTPResponse | None = None
    try:
        connection.request("GET", target, headers={"Host": f"{host}:{port}",
                                                   "Accept": "application/json"})
        sock = connection.sock  # the reply may take it over from the connection
        reply = connection.getresponse()
        status = reply.status
        body = _read_capped(reply, sock, deadline) if status == 200 else b""
    except TimeoutError:
        raise OSError(f"status did not answer within {timeout:g}s") from None
    except http.client.HTTPException:
        raise OSError("status unreadable: not an HTTP answer") from None
    except OSError as exc:
        raise OSError(f"status unreachable: {exc.strerror or type(exc).__name__}") from None
    finally:
        if reply is not None:
            reply.close()
        connection.close()
    if status != 200:
        raise OSError(f"status answered {status}")
    return body


def parse_status(body: bytes) -> dict[str, Any]:
    """The typed fields of a status document, or ``ValueError`` saying why it is unusable."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        raise ValueError("status unreadable: not JSON") from None
    try:
        return StatusDocument.model_validate(document).model_dump()
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "the document"
        raise ValueError(f"status unreadable: {where}: {error['msg']}") from None


def fetch_status(url: str, networks: Sequence[Network], timeout: float) -> dict[str, Any]:
    """:func:`fetch_body` then :func:`parse_status`."""
    return parse_status(fetch_body(url, networks, timeout))
