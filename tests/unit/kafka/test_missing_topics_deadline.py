"""The start-up topic check near its deadline (``kafka/topics.py``: ``missing_topics``).

A cluster that answered, listing which topics it has, is not unreachable because the
last request before the deadline (given only what was left of it, down to 10 ms) timed
out: on a loaded machine that turned "missing topics: ..." into "no broker answered"
(seen in tests/e2e/test_startup.py under load). A unit test of the retry logic: the
admin client is a stand-in that answers once and then times out.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from sharedstream.kafka import topics

pytestmark = pytest.mark.unit


class AnswersOnce:
    """An admin client whose cluster lists ``orders`` once, then never answers again."""

    calls = 0

    def __init__(self, settings: dict[str, Any]) -> None:
        pass

    def list_topics(self, timeout: float) -> Any:
        AnswersOnce.calls += 1
        if AnswersOnce.calls == 1:
            return SimpleNamespace(topics={"orders": object()})
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "timed out"))

    def poll(self, timeout: float) -> int:
        return 0


def test_a_cluster_that_answered_reports_missing_topics_not_unreachable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topics, "AdminClient", AnswersOnce)
    AnswersOnce.calls = 0
    found = topics.missing_topics("e2e", {"bootstrap.servers": "127.0.0.1:9"},
                                  ["orders", "no-such-topic"], timeout=0.3)
    assert found == ["no-such-topic"]
    assert AnswersOnce.calls > 1  # it did ask again before the deadline
