"""Schema lookups: one per (registry, schema id) per triggerer, and when a 404 is final.

**One lookup.** Each registry connection has one client (see
:mod:`sharedstream.serde.registries`), of the class :func:`client_class` makes: its
``get_schema`` keeps every schema it fetched by (schema id, format, the subject's
context), whichever declaration, topic or thread asked, and a second asker while a
lookup is in flight waits for that lookup's outcome instead of asking too. The
confluent client's own cache is by subject, so two topics (or an Avro and a JSON
Schema declaration on one topic, in parallel) each paid a request before. Referenced
schemas (``get_version`` of a subject and version) go the same way.

**When a 404 is the value's fault.** A registry that restarts may answer 404 for
schema ids it knows while it reloads them (Karapace does, for about a second), so a
404 alone proves nothing. It becomes the value's fault, a :class:`SchemaNotFound`
(the message is rejected), only when both hold:

* the id has been missing for ``missing.schema.grace.sec`` (30 s by default) since
  the first 404 for it; and
* the registry has shown since then that it serves: it answered another lookup after
  that first 404 and after its last failure. Without such an answer, one cheap request
  (the subject list) asks it.

Until then the lookup raises :class:`SchemaRegistryUnavailable`: the message is held
and redelivered with backoff, never counted as an attempt, never dead-lettered, like
any outage of the registry. Within the grace it also says when the grace ends
(``retry_after``: the time left, plus :data:`PAST_GRACE`), so the retry that decides
comes then rather than at the next backoff step, up to ``retry_backoff_max`` later;
past the grace, with a registry not shown to serve, it says nothing and the backoff
alone paces the retries. Failure window: a registry that keeps answering its subject
list but still lacks the id after the grace (a reload longer than the grace) has the
message rejected; the grace is the setting that bounds it.

**What an outage shows** (:class:`RegistryHealth`, one per registry id of a
triggerer, in its :class:`RegistryHealths`): the first failure logs one line (the
registry does not answer, why) and the first answer after it another (it answers
again, after how long, how many lookups failed meanwhile); every failed lookup counts,
by reason, in ``sharedstream_schema_registry_failures``; that triggerer's ``/readyz``
names the registry while it is out. No traceback: the watcher that waits logs none for
an ``InfrastructureError`` either.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Literal

from sharedstream.core.message import ValueDecodeError
from sharedstream.core.streamconfig import InfrastructureError

log = logging.getLogger("sharedstream.serde.registry")

PAST_GRACE = 0.1
"""Seconds past the grace's end that a held lookup asks to be retried at: a retry timed
exactly at the end could find the grace a clock tick short and be held once more."""


class SchemaRegistryUnavailable(InfrastructureError):
    """The registry a value needs cannot be asked now: the message waits, it is not bad.
    :class:`RegistryHealth` logs the outage's start and end (``reported``)."""

    reported = True


class SchemaNotFound(ValueDecodeError):
    """The registry, serving, does not know the schema id past the grace: the value's fault."""


@dataclass(frozen=True, slots=True)
class RegistryFigures:
    """What ``/metrics`` shows of one registry: out or not, failed lookups by reason."""

    registry: str
    out: bool
    failures: dict[str, int]


class RegistryHealth:
    """One registry's state as its lookups saw it: answering, or out since when and why.

    Thread-safe: lookups run in worker threads and on the event loop.
    """

    def __init__(self, registry_id: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.registry_id = registry_id
        self.clock = clock
        self._lock = threading.Lock()
        self.out_since: float | None = None
        self.why: str | None = None
        self.last_failure = float("-inf")
        self.last_answer = float("-inf")
        self.failures: Counter[str] = Counter()
        self._failed_while_out = 0

    def failed(self, why: str, reason: str) -> None:
        """A lookup failed for want of the registry (``reason``: the metric's label)."""
        with self._lock:
            now = self.clock()
            self.failures[reason] += 1
            self.last_failure = now
            self.why = why
            if self.out_since is not None:
                self._failed_while_out += 1
                return
            self.out_since, self._failed_while_out = now, 1
        log.warning("schema registry %r: %s; the messages that need it are held and retried "
                    "until it answers", self.registry_id, why)

    def answered(self) -> None:
        """The registry answered a lookup (a schema, or the subject list)."""
        with self._lock:
            now = self.clock()
            self.last_answer = now
            since, self.out_since, self.why = self.out_since, None, None
            failed = self._failed_while_out
        if since is not None:
            log.warning("schema registry %r answers again, after %.1fs (%d failed lookups)",
                        self.registry_id, now - since, failed)

    def serving_since(self, moment: float) -> bool:
        """Whether the registry answered a lookup after ``moment`` and after its last
        failure."""
        with self._lock:
            return self.last_answer > max(moment, self.last_failure)

    def problem(self) -> str | None:
        with self._lock:
            return None if self.out_since is None else self.why

    def figures(self) -> RegistryFigures:
        with self._lock:
            return RegistryFigures(self.registry_id, self.out_since is not None,
                                   dict(self.failures))


class RegistryHealths:
    """The :class:`RegistryHealth` of each registry id of one set of registries (one
    triggerer's, or the process's: :class:`sharedstream.serde.registries.SchemaRegistries`),
    made on first ask. Per set, so two triggerers of a process that both name a registry
    id (perhaps different registries) never mix their outages, readiness or metrics."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[str, RegistryHealth] = {}

    def of(self, registry_id: str) -> RegistryHealth:
        with self._lock:
            found = self._by_id.get(registry_id)
            if found is None:
                found = self._by_id[registry_id] = RegistryHealth(registry_id)
            return found

    def problems(self) -> list[str]:
        """Why the owner is not ready on account of schema registries (empty: none is
        out). A registry counts as out from a lookup that failed for want of it until a
        lookup that it answers; a message held for it is retried with backoff meanwhile.
        """
        return [f"schema registry {one.registry_id!r}: {why}" for one in self._sorted()
                if (why := one.problem()) is not None]

    def figures(self) -> list[RegistryFigures]:
        return [one.figures() for one in self._sorted()]

    def _sorted(self) -> list[RegistryHealth]:
        with self._lock:
            return [state for _, state in sorted(self._by_id.items())]


class _Flight:
    """One lookup in flight: who asks meanwhile waits on ``done`` for its outcome."""

    __slots__ = ("done", "error", "result")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: Any = None
        self.error: Exception | None = None


class SharedLookups:
    """The single flight, the cache and the 404 rule of one registry client (a mixin of
    the client class: see :func:`client_class`)."""

    def _share_lookups(self, health: RegistryHealth, grace: float) -> None:
        self._health, self._grace = health, grace
        self._lookup_lock = threading.Lock()
        self._found: dict[Hashable, Any] = {}
        self._flights: dict[Hashable, _Flight] = {}
        self._missing: dict[Hashable, float] = {}

    def _shared(self, key: Hashable, what: str, fetch: Callable[[], Any]) -> Any:
        with self._lookup_lock:
            if key in self._found:
                return self._found[key]
            flight = self._flights.get(key)
            leader = flight is None
            if flight is None:
                flight = self._flights[key] = _Flight()
        if not leader:
            flight.done.wait()
            if flight.error is not None:
                raise copy.copy(flight.error)  # its own traceback; retry_after kept
            return flight.result
        try:
            flight.result = self._classified(key, what, fetch)
        except Exception as exc:
            flight.error = exc
            raise
        finally:
            with self._lookup_lock:
                if flight.error is None:
                    self._found[key] = flight.result
                del self._flights[key]
            flight.done.set()
        return flight.result

    def _classified(self, key: Hashable, what: str, fetch: Callable[[], Any]) -> Any:
        from confluent_kafka.schema_registry.error import SchemaRegistryError
        rid = self._health.registry_id
        try:
            found = fetch()
        except SchemaRegistryError as exc:
            status = exc.http_status_code
            if status == 404:
                return self._not_found(key, what, exc.error_message)
            why = f"HTTP {status} looking up {what} ({exc.error_message})"
            self._health.failed(why, f"http_{status}")
            raise SchemaRegistryUnavailable(f"schema registry {rid!r}: {why}") from None
        except Exception as exc:
            if not unreachable(exc):
                raise ValueDecodeError(f"{what}: {type(exc).__name__}: {exc}") from None
            why = f"{type(exc).__name__} looking up {what} ({exc})"
            self._health.failed(why, "unreachable")
            raise SchemaRegistryUnavailable(f"schema registry {rid!r}: {why}") from None
        with self._lookup_lock:
            self._missing.pop(key, None)
        self._health.answered()
        return found

    def _not_found(self, key: Hashable, what: str, message: str) -> Any:
        rid, health = self._health.registry_id, self._health
        now = health.clock()
        with self._lookup_lock:
            first = self._missing.setdefault(key, now)
        left = first + self._grace - now
        if left <= 0 and (health.serving_since(first) or self._probe()):
            raise SchemaNotFound(f"{what}: not found in schema registry {rid!r} ({message})")
        why = (f"{what} not found ({message}); held for up to {self._grace:g}s "
               "(missing.schema.grace.sec) while the registry may be loading its schemas")
        health.failed(why, "not_found")
        raise SchemaRegistryUnavailable(f"schema registry {rid!r}: {why}",
                                        retry_after=left + PAST_GRACE if left > 0 else None)

    def _probe(self) -> bool:
        """Ask the registry for its subject list: True when it answers (it serves)."""
        try:
            self.get_subjects()  # type: ignore[attr-defined]  # the client's method
        except Exception:  # the lookup that asked is held; its failure counts already
            return False
        self._health.answered()
        return True


def unreachable(exc: BaseException) -> bool:
    """True for a failure to reach the registry at all (refused, reset, timed out): an
    OSError or one of the HTTP client's transport errors (confluent-kafka's client is
    httpx, vendored as ``httpx2`` in recent releases)."""
    return isinstance(exc, OSError) or type(exc).__module__.split(".")[0] in (
        "httpx", "httpx2", "httpcore", "httpcore2")


_client_class: type[Any] | None = None


def client_class() -> type[Any]:
    """``SchemaRegistryClient`` with :class:`SharedLookups` (made once, on first use: the
    client's package is imported only when a registry is)."""
    global _client_class
    if _client_class is None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        class SharedLookupsClient(SharedLookups, SchemaRegistryClient):
            def __init__(self, conf: dict[str, Any], health: RegistryHealth,
                         grace: float) -> None:
                super().__init__(conf)
                self._share_lookups(health, grace)

            def get_schema(self, schema_id: int, subject_name: str | None = None,
                           fmt: str | None = None, reference_format: str | None = None
                           ) -> Any:
                key = ("id", _context(subject_name), schema_id, fmt, reference_format)
                more = () if reference_format is None else (reference_format,)
                return self._shared(key, f"schema id {schema_id}", lambda: super(
                    SharedLookupsClient, self).get_schema(schema_id, subject_name, fmt, *more))

            def get_version(self, subject_name: str, version: int | Literal["latest"] = "latest",
                            deleted: bool = False, fmt: str | None = None) -> Any:
                def fetch() -> Any:
                    return super(SharedLookupsClient, self).get_version(
                        subject_name, version, deleted, fmt)
                if not isinstance(version, int):
                    return fetch()  # "latest" changes: never kept
                return self._shared(("version", subject_name, version, deleted, fmt),
                                    f"{subject_name} version {version}", fetch)

        _client_class = SharedLookupsClient
    return _client_class


def _context(subject: str | None) -> str:
    """The schema context a subject names (``:.ctx:subject``); ids are unique per
    context, so the default context's subjects all share one lookup per id."""
    if subject and subject.startswith(":."):
        return subject[1:].partition(":")[0]
    return ""
