"""``[airflow.<name>]``: one Airflow 3 instance the bridge reads from or writes to.

Kept free of HTTP imports so the config loader can validate these sections
without the optional ``airflow`` extra installed. Secrets (``password``,
``token``) are excluded from ``repr`` and never appear in an error message: a
config error names the key, never its value.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class AirflowInstanceSettings:
    """How to reach and authenticate with one Airflow instance.

    * ``base_url``: the API server's root (``http://host:8080``), without ``/api/v2``.
    * ``username`` + ``password``: exchanged for a JWT at ``POST /auth/token``; the
      token is cached and fetched again when the server answers 401.
    * ``token``: a ready bearer token instead (not refreshed: a 401 holds the
      messages until the operator fixes it).
    * ``max_requests_per_second`` / ``burst``: a token bucket per instance, so a
      backlog replayed from Kafka cannot flood one API server (0 = unlimited).
    * ``request_timeout``: seconds per HTTP request.
    """

    base_url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    max_requests_per_second: float = 0.0
    burst: int = 10
    request_timeout: float = 10.0

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        has_login = self.username is not None or self.password is not None
        if has_login and (self.username is None or self.password is None):
            raise ValueError("username and password go together")
        if has_login == (self.token is not None):
            raise ValueError("give either username and password, or token (exactly one)")
        if self.max_requests_per_second < 0:
            raise ValueError("max_requests_per_second must be >= 0 (0 = unlimited)")
        if self.burst < 1:
            raise ValueError("burst must be >= 1")
        if not self.request_timeout > 0:
            raise ValueError("request_timeout must be > 0")
