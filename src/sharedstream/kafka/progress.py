"""Remembered progress above the committed offset, carried in commit metadata.

Guarantee 7: after a restart or a reassignment, messages every watcher already
handled are not handed out again. A partition's committed offset cannot express
that on its own when a held message sits below handled ones (offsets 0..5, 2
held: the commit stays at 2, yet 3, 4, 5 are done). So every commit also carries,
in its metadata string, the set of terminal offsets above the committed one.

Format: ``"ss1:" + urlsafe-base64(varints)``, no padding. The varints are
``(gap, run)`` pairs walking up from the committed offset: skip ``gap`` offsets
that are not terminal, then ``run`` terminal offsets. A long run of handled
messages costs two or three bytes whatever its length.

Size: the broker refuses metadata longer than ``offset.metadata.max.bytes``
(4096 by default) and fails the whole commit. The encoder therefore keeps only
the pairs that fit within ``max_chars``, nearest the committed offset first.
Dropped offsets are handed out again after a restart; that is safe (events are
idempotent by identity), only not cheap.

Failure window: the metadata is written with the commit, atomically on the
broker. A crash after an ack but before the next commit re-hands the messages
acked in that interval (at most one commit interval's worth).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable

PREFIX = "ss1:"
# The broker default for offset.metadata.max.bytes is 4096; stay below it with margin.
DEFAULT_MAX_CHARS = 4000
# A decoded run longer than this is corrupt text, not progress: refuse to expand it.
_MAX_RUN = 1_000_000


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _runs(committed: int, terminal: Iterable[int]) -> list[tuple[int, int]]:
    pairs: list[tuple[int, int]] = []
    cursor = committed
    for offset in sorted(o for o in set(terminal) if o >= committed):
        if pairs and offset == cursor:
            gap, run = pairs[-1]
            pairs[-1] = (gap, run + 1)
        else:
            pairs.append((offset - cursor, 1))
        cursor = offset + 1
    return pairs


def encode_progress(
    committed: int, terminal: Iterable[int], max_chars: int = DEFAULT_MAX_CHARS
) -> str:
    """Metadata remembering ``terminal`` offsets at or above ``committed``.

    Offsets below ``committed`` are already covered by the commit and ignored.
    Returns ``""`` when there is nothing to remember.
    """
    chunks = [_varint(gap) + _varint(run) for gap, run in _runs(committed, terminal)]
    budget_bytes = (max_chars - len(PREFIX)) * 3 // 4
    payload = bytearray()
    for chunk in chunks:
        if len(payload) + len(chunk) > budget_bytes:
            break
        payload += chunk
    if not payload:
        return ""
    return PREFIX + base64.urlsafe_b64encode(bytes(payload)).decode("ascii").rstrip("=")


def decode_progress(committed: int, metadata: str | None) -> frozenset[int]:
    """The terminal offsets remembered in ``metadata`` (empty for foreign or corrupt text).

    Corrupt metadata is not an error: forgetting progress only re-hands messages.
    """
    if not metadata or not metadata.startswith(PREFIX):
        return frozenset()
    text = metadata[len(PREFIX) :]
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return frozenset()
    numbers: list[int] = []
    value = shift = 0
    for byte in data:
        value |= (byte & 0x7F) << shift
        if byte & 0x80:
            shift += 7
            if shift > 63:
                return frozenset()
            continue
        numbers.append(value)
        value = shift = 0
    if shift or len(numbers) % 2:
        return frozenset()
    out: set[int] = set()
    cursor = committed
    for gap, run in zip(numbers[::2], numbers[1::2], strict=True):
        if run > _MAX_RUN:
            return frozenset()
        start = cursor + gap
        out.update(range(start, start + run))
        cursor = start + run
    return frozenset(out)
