"""The JSON form of an event that webhooks receive and the Kafka destination writes.

Its ``identity`` is the event's unique key as one string: a repeat after a crash
carries the same one, so a receiver can drop it. ``id`` is the event's position in
commit order (the cursor ``follow`` and the destinations keep).
"""

from __future__ import annotations

import json
from typing import Any

from sharedstream.statestore.events import EventRecord

IDENTITY_HEADER = "sharedstream.event.identity"
ID_HEADER = "sharedstream.event.id"


def event_document(event: EventRecord) -> dict[str, Any]:
    o = event.origin
    return {"id": event.id, "identity": event.identity, "asset": event.asset,
            "asset_uri": event.asset_uri, "watcher": event.watcher,
            "source": {"topic": o.topic, "topic_id": o.topic_id, "partition": o.partition,
                       "offset": o.offset, "event_index": event.event_index},
            "created_at": event.created_at.isoformat(), "payload": event.payload}


def event_body(event: EventRecord) -> bytes:
    """The document as compact UTF-8 JSON: the bytes a webhook signature covers."""
    return json.dumps(event_document(event), ensure_ascii=False,
                      separators=(",", ":")).encode()
