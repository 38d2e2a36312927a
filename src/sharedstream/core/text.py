"""Free text on its way to a database column or a Kafka header, made storable everywhere.

Free text is what a message, a filter or an exception says in words: rejection reasons,
value previews, refusal reasons of destinations. It comes from anywhere, so it may hold
what no backend stores as text (PostgreSQL refuses NUL; no UTF-8 encoder takes a lone
surrogate, which ``bytes.decode(errors="surrogateescape")`` produces) and be of any size
(MariaDB's TEXT stops at 64 KiB; a dead-letter header that large would make the record too
big for the broker). A writer that failed on such text would hold its message for ever,
so every writer passes free text through :func:`storable_text` first: the text is kept
readable, never refused. It lives in ``core`` because the state store and the Kafka
adapter both write free text and neither may import the other.

JSON documents (event payloads, state values) are not free text: they are exact, so a
lone surrogate there is refused (:func:`lone_surrogate`), never rewritten.
"""

from __future__ import annotations

import re

# The longest free text stored, in characters (at most 4 UTF-8 bytes each: 16 KiB, well
# inside MariaDB's 64 KiB TEXT and a broker's default 1 MB record).
MAX_TEXT_CHARS = 4096

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def storable_text(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` as every backend and header stores it: each NUL or lone surrogate written
    as the six characters of its ``\\uXXXX`` escape (``\\u0000``, ``\\udcff``), and text
    longer than ``limit`` characters cut to ``limit``, ending with a marker that says how
    long it was. Lossy on purpose: this is for people to read, not to parse."""
    if len(text) <= limit and (text.isascii() and "\x00" not in text):
        return text
    # Escaping only lengthens, so the first ``limit`` characters are all that can be kept.
    head = _UNSTORABLE.sub(_escape, text[:limit])
    if len(text) <= limit and len(head) <= limit:
        return head
    marker = f" [cut: {len(text)} characters]"
    return head[: limit - len(marker)] + marker


def lone_surrogate(text: str) -> tuple[int, str] | None:
    """``(index, escape)`` of the first lone surrogate in ``text``, or None when UTF-8 can
    encode it all (an ASCII str answers at once)."""
    if text.isascii():
        return None
    found = _SURROGATE.search(text)
    return None if found is None else (found.start(), _escape(found))
