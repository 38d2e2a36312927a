"""A record as a watcher sees it, and where a record sits: the project's two value types.

``KafkaMessage`` is the public value a filter iterates. ``Coordinates`` is the one
declaration of a message's coordinates: what events, state writes, rejections,
dead-letter headers and replays are keyed by. Every room uses these two; none
declares its own topic/partition/offset record.
"""

from __future__ import annotations

import json as _json
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar

_T = TypeVar("_T")


class ReadPosition(NamedTuple):
    """Where a copy of a message was read: topic, partition, offset."""

    topic: str
    partition: int
    offset: int


class ValueDecodeError(ValueError):
    """The value cannot be read by a watcher's deserialiser: the message's fault, not an outage.

    ``reason`` is what the watcher's rejection says (and what the dead letter carries).
    An outage of something the decode needs (a schema registry) is not this error: it
    is an ``InfrastructureError``, which holds the message instead.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ValueDecoder(Protocol):
    """Turns a message's value into what a watcher reads; hashable, equal when interchangeable.

    :meth:`KafkaMessage.decoded` keys its shared cache on the decoder itself, so two
    watchers holding equal decoders (two ``JsonValue(model=Order)``) share one decode.
    ``decode`` is called with a non-None value only; it raises :class:`ValueDecodeError`
    for bytes it cannot read, anything else for a failure that is not the value's.
    """

    def __hash__(self) -> int: ...

    def decode(self, value: bytes, message: KafkaMessage) -> Any: ...


class _Fields(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    replay_count: int = 0
    replayed_at: ReadPosition | None = None
    delivery: int = 1


class KafkaMessage(_Fields):
    """One Kafka record as a watcher sees it.

    ``key`` and ``value`` are the raw bytes (None for a null key or a tombstone);
    ``timestamp`` is milliseconds since the epoch as the broker reported it (-1 if
    unknown); ``headers`` keep their order and may repeat a name.

    ``topic``/``partition``/``offset``/``timestamp`` are the message's *original*
    coordinates, also for a dead letter replayed by ``sharedstream dlq replay``: what
    its events are keyed by. ``replay_count`` says how many times it was replayed (0
    for a first read, and for a crash redelivery of one, which is the same copy read
    again); :attr:`read_at` says where this copy was read (a replay topic, say).
    ``replayed_at`` holds that place for a replay only, None otherwise: read
    :attr:`read_at`, which is the message's own coordinates for a first read.
    ``delivery`` is the hand-out round in this process: 1 for the first, 2 and up for a
    redelivery after a watcher failed on it (raised, timed out, or its queue was full),
    which reaches only the watchers that have not handled it, after later messages of
    its partition.
    :attr:`catching_up` sums up both kinds of late copy for a watermark check.

    Decode once: every watcher of a group receives this same object, so :attr:`text`,
    :attr:`json` and :meth:`decoded` compute on first use and keep the result (or the
    :class:`ValueDecodeError`) on the message; a second ask, by this watcher or a
    sibling, is a dictionary lookup. The cache is not part of the tuple: equality,
    hashing and unpacking see the ten fields only.
    """

    # No __slots__ here: a tuple subclass cannot add slots, so the decode cache lives in
    # the instance __dict__, which Python allocates only when the first decode is stored.

    @property
    def text(self) -> str | None:
        """The value as UTF-8 text, None for a tombstone; :class:`ValueDecodeError`
        ("not UTF-8") otherwise."""
        cache: dict[Any, Any] = self.__dict__
        found = cache.get(TEXT, _MISSING)  # the cached path, without a second call
        return found if found.__class__ is str else self.decoded(TEXT)

    @property
    def json(self) -> Any:
        """The value parsed as JSON, None for a tombstone (read ``value is None`` to tell
        it from a JSON ``null``); :class:`ValueDecodeError` ("not JSON: ...") otherwise.

        The first ask takes :class:`_Json`'s fast path inline (one frame instead of three:
        about 8% of a batch watcher's decode); anything else goes through
        :meth:`decoded`, which gives the same result."""
        cache: dict[Any, Any] = self.__dict__
        found = cache.get(JSON, _MISSING)
        if found is _MISSING:
            value = self.value
            if value is not None:
                found = _fast_json(value)
                if found is not _MISSING:
                    cache[JSON] = found
                    return found
        elif found.__class__ is not _Failed:
            return found
        return self.decoded(JSON)

    def decoded(self, decoder: ValueDecoder) -> Any:
        """The value as ``decoder`` reads it, decoded at most once per message and decoder.

        A :class:`ValueDecodeError` is kept too and raised again to every asker. Any
        other exception (a registry that does not answer) is not kept: the next ask,
        a redelivery after backoff, tries again.
        """
        value = self.value
        if value is None:
            return None
        # The decoders are the keys of the instance dict itself: no second dict per message.
        cache: dict[Any, Any] = self.__dict__
        found = cache.get(decoder, _MISSING)
        if found is _MISSING:
            try:
                found = decoder.decode(value, self)
            except ValueDecodeError as exc:
                found = _Failed(exc)
            cache[decoder] = found
        if found.__class__ is _Failed:
            raise found.error
        return found

    def derived(self, key: Hashable, make: Callable[[KafkaMessage], _T]) -> _T:
        """``make(self)``, computed on the first ask for ``key`` and kept on the message
        as a decode is: for what every watcher of the group derives from the record alike
        (the tracing room keeps the record's parsed trace context here, so its headers are
        read once per message, not once per watcher). ``key`` shares the decoders'
        namespace: use an object of your own (a class, say), never a decoder."""
        cache: dict[Any, Any] = self.__dict__
        found = cache.get(key, _MISSING)
        if found is _MISSING:
            found = cache[key] = make(self)
        return found  # type: ignore[no-any-return]

    def _replace(self, /, **changes: Any) -> KafkaMessage:
        """A copy with ``changes``; a redelivery (same value) keeps the decodes made."""
        copy: KafkaMessage = super()._replace(**changes)
        if "value" not in changes and self.__dict__:
            copy.__dict__.update(self.__dict__)
        return copy

    def __getstate__(self) -> None:
        # Pickles and copies carry the fields only: decodes may hold unpicklable models.
        return None

    @property
    def is_replay(self) -> bool:
        """True for a dead letter replayed to this watcher: not handled before, whatever
        a watermark says (its rejection was the watcher's last word on it)."""
        return self.replay_count > 0

    @property
    def is_retry(self) -> bool:
        """True for a redelivery in this process after a watcher failed on the message."""
        return self.delivery > 1

    @property
    def catching_up(self) -> bool:
        """True when this watcher has not handled the message although later ones of its
        partition may have moved its watermark: a DLQ replay, or a retry after a failure.

        A crash redelivery is not catching up: it is the same copy read again from the
        committed offset, and whatever a watermark says about it was committed with its
        events (guarantee 3), so a watermark check may skip it.
        """
        return self.replay_count > 0 or self.delivery > 1

    @property
    def read_at(self) -> ReadPosition:
        """Where this copy was read: the replay's place for a replay, else the message's
        own coordinates (built on demand: a first read carries no second position)."""
        at = self.replayed_at
        return ReadPosition(self.topic, self.partition, self.offset) if at is None else at


_MISSING: Any = object()


class _Failed:
    """A kept :class:`ValueDecodeError` (a decoded value is kept as it is)."""

    __slots__ = ("error",)

    def __init__(self, error: ValueDecodeError) -> None:
        self.error = error


# Plain classes, one instance each: their identity hash is the cheapest cache key.
class _Text:
    """UTF-8 text: what :attr:`KafkaMessage.text` decodes with."""

    __slots__ = ()

    def decode(self, value: bytes, message: KafkaMessage) -> str:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueDecodeError("not UTF-8") from None


# One decoder, built once: its ``raw_decode`` parses text without ``json.loads``'s
# per-call encoding detection and whitespace matching (half the cost of a small value).
_raw_decode = _json.JSONDecoder().raw_decode
try:  # msgspec's decoder, when installed: 0.32 us for a 90-byte order against 1.19 us
    from msgspec.json import Decoder as _Decoder  # for raw_decode (issue 42)

    _msgspec_decode: Any = _Decoder().decode
except ImportError:  # pragma: no cover - msgspec is a dependency; kept for a bare install
    _msgspec_decode = None


def _fast_json(value: bytes) -> Any:
    """``value`` parsed on the fast path, or ``_MISSING`` when it does not take it (the
    full path then gives ``json.loads``'s result or error). msgspec, when installed,
    refuses everything ``json.loads`` reads differently or refuses (NaN and Infinity,
    numbers out of a float's range, lone surrogates, a BOM, other encodings, integers
    past ``int``'s digit limit, bad JSON): each then takes the full path, so a result
    is always exactly ``json.loads``'s."""
    if _msgspec_decode is not None:
        try:
            return _msgspec_decode(value)
        except ValueError:  # msgspec.DecodeError and its kin
            return _MISSING
    try:
        text = value.decode("utf-8")
        found, end = _raw_decode(text)
        if end == len(text):
            return found
    except ValueError:  # UnicodeDecodeError and JSONDecodeError: the full path says which
        pass
    return _MISSING


class _Json:
    """JSON (UTF-8, -16 or -32 as ``json.loads`` detects): :attr:`KafkaMessage.json`.

    The common case, UTF-8 text that is one JSON document, is parsed by msgspec when it
    is installed (else from its text by the standard library's decoder). Whatever that
    path does not take (another encoding, a BOM, surrogates, NaN, bad JSON) is
    ``json.loads(value)``, so results and error reasons are exactly ``json.loads``'s: a
    value the fast path accepts has no NUL in its first two bytes and no BOM, which is
    when ``json.loads`` reads UTF-8 too (:func:`_fast_json`).
    """

    __slots__ = ()

    def decode(self, value: bytes, message: KafkaMessage) -> Any:
        found = _fast_json(value)
        if found is not _MISSING:
            return found
        try:
            return _json.loads(value)
        except UnicodeDecodeError:
            raise ValueDecodeError("not JSON: not UTF-8") from None
        except ValueError as exc:
            raise ValueDecodeError(f"not JSON: {exc}") from None


TEXT: ValueDecoder = _Text()
JSON: ValueDecoder = _Json()


# A Coordinates' ``(topic, topic_id, partition, offset)``, the columns an ``asset_event`` row
# is keyed by (with its watcher and index): the writer reads them once per stored event,
# and building a frozen Coordinates for that cost a microsecond each (issue 28).
CoordinateFields = tuple[str, str, int, int]


@dataclass(frozen=True, slots=True)
class Coordinates:
    """Where a message was first read: its topic (name and id), partition and offset.

    ``topic_id`` tells a recreated topic from the old one of the same name, so the
    same offset of two incarnations never collides. ``timestamp`` is the broker's
    timestamp in milliseconds, -1 where it is unknown or not kept (``asset_event``
    rows do not keep it). A replayed dead letter keeps its original coordinates.
    """

    topic: str
    topic_id: str
    partition: int
    offset: int
    timestamp: int = -1

    @property
    def identity(self) -> str:
        """``topic_id:partition:offset``: the key of a message across every table and header."""
        return format_identity(self.topic_id, self.partition, self.offset)

    @property
    def fields(self) -> CoordinateFields:
        """``(topic, topic_id, partition, offset)``: what an event row is keyed by."""
        return (self.topic, self.topic_id, self.partition, self.offset)


def format_identity(topic_id: str, partition: int, offset: int) -> str:
    return f"{topic_id}:{partition}:{offset}"


def where_read(record: object) -> str:
    """``topic[partition]@offset``: how log lines name a message. Never its repr: the
    Kafka adapter's ledger record is the message itself, whose repr holds the value, and
    a value can hold anything a producer sent (log stores are kept and read widely).
    A record without a position (a unit test's bare window) is named by its type: a log
    line must not raise."""
    try:
        return f"{record.topic}[{record.partition}]@{record.offset}"  # type: ignore[attr-defined]
    except AttributeError:
        return f"<{type(record).__name__}>"
