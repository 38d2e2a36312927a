"""``kind = "webhook"``: one signed JSON ``POST`` per event.

Headers: ``Idempotency-Key`` (the event's identity: a repeat after a crash carries the
same one), ``X-Sharedstream-Signature`` (``sha256=`` + the hex HMAC-SHA256 of the body
with the shared ``secret``), ``X-Sharedstream-Event-Id`` (the cursor position), and
``traceparent`` (W3C Trace Context, the delivery span) for an event persisted while
tracing was on.
A 2xx is delivered; 408, 429, 5xx and network errors are transient (retried, the
cursor holds); any other answer is a permanent refusal of that event.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

import httpx

from sharedstream import tracing
from sharedstream.delivery.document import event_body
from sharedstream.delivery.errors import PermanentDeliveryError, TransientDeliveryError
from sharedstream.delivery.sender import Results
from sharedstream.delivery.settings import WebhookDestination
from sharedstream.statestore.events import EventRecord
from sharedstream.tracing import deliveryspans

SIGNATURE_HEADER = "X-Sharedstream-Signature"
IDEMPOTENCY_HEADER = "Idempotency-Key"
EVENT_ID_HEADER = "X-Sharedstream-Event-Id"


def signature(secret: str, body: bytes) -> str:
    """The signature header's value; a receiver recomputes it to verify the body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class WebhookSender:
    def __init__(self, options: WebhookDestination, *,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._options = options
        self._http = httpx.AsyncClient(timeout=options.timeout, transport=transport)

    async def send(self, events: Sequence[EventRecord], *, maybe_sent: bool) -> Results:
        results: Results = []
        for event in events:
            try:
                await self._post(event)
            except TransientDeliveryError as exc:
                results.append(exc)
                break
            except PermanentDeliveryError as exc:
                results.append(exc)
            else:
                results.append(None)
        return results

    async def _post(self, event: EventRecord) -> None:
        if tracing.tracer is not None and event.trace_context is not None:
            with deliveryspans.delivering(event.trace_context, "webhook", event.id,
                                    {"url.full": self._options.url}) as carrier:
                await self._post_headers(event, carrier)
        else:
            await self._post_headers(event, {})

    async def _post_headers(self, event: EventRecord, carrier: dict[str, str]) -> None:
        body = event_body(event)
        headers = {"Content-Type": "application/json", IDEMPOTENCY_HEADER: event.identity,
                   SIGNATURE_HEADER: signature(self._options.secret, body),
                   EVENT_ID_HEADER: str(event.id), **carrier}
        try:
            response = await self._http.post(self._options.url, content=body, headers=headers)
        except httpx.TimeoutException:
            raise TransientDeliveryError("webhook: timed out", "timeout") from None
        except httpx.HTTPError as exc:
            raise TransientDeliveryError(f"webhook: {type(exc).__name__}", "network") from None
        status = response.status_code
        if 200 <= status < 300:
            return
        reason = f"webhook answered {status}: {response.text[:200]}"
        if status in (408, 429) or status >= 500:
            raise TransientDeliveryError(reason, f"http_{status}")
        raise PermanentDeliveryError(reason, f"http_{status}")

    async def aclose(self) -> None:
        await self._http.aclose()
