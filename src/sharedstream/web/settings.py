"""What the console runs with, and the one rule of its security: no token, no network.

The console binds ``127.0.0.1`` by default. Bound to any other address it refuses to
start without a token; with a token every request (API, pages, static files, the
OpenAPI document) must carry it, as ``Authorization: Bearer <token>`` or as the
password of HTTP basic auth (any user name; browsers ask for it). Without a token, on
loopback, a request whose ``Host`` is not a loopback name is refused: a web page
cannot reach the console through DNS rebinding.

The token comes from ``--token``, else ``SHAREDSTREAM__WEB__TOKEN``, else the config's
``[web] token``. The environment variable is read and removed from the environment
(child processes need not inherit it).

Two roles. The read token (above) reads. Each operate token (``[web] operate_tokens``,
``{name: token}``, or ``SHAREDSTREAM__WEB__OPERATE_TOKENS``) reads too, and is the only
thing that may act, and only as ``Authorization: Bearer``: a browser resends basic-auth
credentials on its own (a form another site posts here would carry them), never a
bearer header, which only the console's own script sets. Without an operate token the
console does not act at all. The audit names who acted by the token's name.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sharedstream.triggerer.config import Config

TOKEN_ENV = "SHAREDSTREAM__WEB__TOKEN"
OPERATE_ENV = "SHAREDSTREAM__WEB__OPERATE_TOKENS"
TOKEN_NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8795
MIN_TOKEN_LENGTH = 16
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
LOOPBACK_NETWORKS: tuple[Network, ...] = (ipaddress.ip_network("127.0.0.0/8"),
                                          ipaddress.ip_network("::1/128"))


class ConsoleSettingsError(ValueError):
    """A console setting that cannot work (one line, never the token itself)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a bind address or a ``Host`` header's name) is loopback only."""
    name = host.strip().strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def take_env_token(environ: MutableMapping[str, str] | None = None) -> str | None:
    """``$SHAREDSTREAM__WEB__TOKEN``, removed from the environment (see the module doc)."""
    env = os.environ if environ is None else environ
    value = env.pop(TOKEN_ENV, None)
    return value or None


def config_token(config: Config) -> str | None:
    """The configuration's ``[web] token`` (None when unset or empty)."""
    return config.web.token or None


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    """The console's options (``sharedstream web``), validated on construction: the
    command's options over the config's ``[web]`` section
    (:class:`~sharedstream.triggerer.config.WebSettings`).

    ``connections`` are the config's ``[connections.<id>]`` tables: used to reach Kafka,
    never rendered. ``connection`` is the one for dead-letter topics and for groups
    whose connection is not recorded. ``trusted_hosts`` adds ``Host`` names accepted
    without a token besides loopback ones (tests use ``testserver``).
    ``status_networks`` are the addresses the triggerers' ``/status`` is fetched from
    (``[web] status_networks``; see ``status_fetch.py``).
    """

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    token: str | None = field(default=None, repr=False)
    operate_tokens: Mapping[str, str] = field(default_factory=dict, repr=False)
    connection: str = "kafka_default"
    connections: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, repr=False)
    dlq_topics: tuple[str, ...] = ()
    destinations: Mapping[str, str] = field(default_factory=dict)  # id -> kind
    sample_interval: float = 5.0
    history_seconds: float = 3600.0
    status_timeout: float = 3.0
    kafka_timeout: float = 5.0
    dlq_max_records: int = 5000
    refresh_ms: int = 2000
    trusted_hosts: tuple[str, ...] = ()
    status_networks: tuple[Network, ...] = LOOPBACK_NETWORKS

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConsoleSettingsError("--port must be 0 (any free port) to 65535")
        if self.token is not None and len(self.token) < MIN_TOKEN_LENGTH:
            raise ConsoleSettingsError(f"the console token must have at least "
                                   f"{MIN_TOKEN_LENGTH} characters")
        if self.token is None and not is_loopback(self.host):
            raise ConsoleSettingsError(
                f"refusing to serve on {self.host} without a token: set "
                f"{TOKEN_ENV} (or --token), or bind 127.0.0.1")
        for name, secret in self.operate_tokens.items():
            if not TOKEN_NAME.match(name) or name == "read":
                raise ConsoleSettingsError(
                    f"[web] operate_tokens: the name {name[:64]!r} must be 1 to 64 letters, "
                    "digits or . _ @ - (not read: the read token's name)")
            if not isinstance(secret, str) or len(secret) < MIN_TOKEN_LENGTH:
                raise ConsoleSettingsError(f"[web] operate_tokens: the token of {name} must have "
                                       f"at least {MIN_TOKEN_LENGTH} characters")
            if secret == self.token:
                raise ConsoleSettingsError(f"[web] operate_tokens: the token of {name} is the "
                                       "read token: give each role its own")
        if len(set(self.operate_tokens.values())) < len(self.operate_tokens):
            raise ConsoleSettingsError("[web] operate_tokens: two names share one token")
        if not self.sample_interval > 0:
            raise ConsoleSettingsError("--sample-interval must be > 0")

    @property
    def needs_token(self) -> bool:
        return self.token is not None
