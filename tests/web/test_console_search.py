"""Dead-letter search (issue 29): one text over reasons, keys and values, any case, on a
real dead-letter topic (the ``seeded`` one: two copies of a sharedstream record with
key ``7``, rejected by ``paid`` for "missing amount" and by ``audit`` with markup, and
a foreign record whose bytes are not UTF-8: never matched as text)."""

from __future__ import annotations

from typing import Any

import pytest
from console_seed import Seeded
from starlette.testclient import TestClient

pytestmark = pytest.mark.integration


def test_dead_letters_are_searched_by_reason_key_and_value(console_app: Any,
                                                          seeded: Seeded) -> None:
    client = TestClient(console_app)

    def found(text: str) -> int:
        reply = client.get("/api/v1/dead-letters", params={"topic": seeded.dlq_topic,
                                                           "q": text})
        assert reply.status_code == 200, reply.text
        total: int = reply.json()["total"]
        return total

    assert found("MISSING amount") == 1  # a reason (the two copies are one row)
    assert found("7") == 1  # the key (and the value)
    assert found('"note"') == 1  # the value
    assert found("no such text") == 0
    page = client.get("/dead-letters", params={"topic": seeded.dlq_topic,
                                               "q": "missing AMOUNT"}).text
    assert '<span id="dead-letter-matches">1</span>' in page
    assert page.count('<tr class="dead-letter">') == 1
