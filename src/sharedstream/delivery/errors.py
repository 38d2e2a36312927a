"""How a destination answers one event: taken, not now, or never.

A sender raises :class:`TransientDeliveryError` when the destination cannot take the
event now (down, timing out, 5xx, 429): the deliverer keeps the cursor where it is and
tries again after a jittered backoff, for as long as it takes.
:class:`PermanentDeliveryError` means the destination refused this very event (an
unknown asset, a 4xx): retrying cannot help, so the event is recorded as undelivered
with the reason and the cursor moves on.
"""

from __future__ import annotations


class DeliveryError(Exception):
    """An event was not delivered; the message is the reason (no secrets in it)."""

    #: A short, stable label for the failure metric (``http_503``, ``timeout``...).
    kind: str

    def __init__(self, reason: str, kind: str = "error") -> None:
        super().__init__(reason)
        self.kind = kind


class TransientDeliveryError(DeliveryError):
    """The destination cannot take events now: hold the cursor and retry."""


class PermanentDeliveryError(DeliveryError):
    """The destination refused this event for good: record it undelivered, move on."""
