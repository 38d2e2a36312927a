"""No hold is lost in a crash (guarantee 7; issue 41): the README's watermark pattern.

A watcher fails one message, moves on, and commits later messages whose units of work
advance its watermark past the failed one. The process is killed with SIGKILL before the
retry. The restarted process must hand the failed message to that watcher again as a
retry (``catching_up``), so the watermark check lets it through and its event is
stored; the committed offsets must not pass it before that.

Before holds were written with the units of work, the restarted process handed the
message out as a plain crash redelivery (``catching_up`` False): the watermark skipped
it, no event was stored, and the commit moved past it (issue 41's reproduction).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from streams import committed, create_schema, event_ids, events, produce, state_value
from triggerer import WATCHERS, Triggerer, until, write_config

MODULE = WATCHERS / "watermarks.py"
COUNT = 20
FAILED_ID = 5


def test_a_message_failed_before_a_kill_reaches_its_watcher_again_catching_up(
        db_url: str, kafka_bootstrap: str, create_topic: Callable[..., str],
        connection: dict[str, Any], triggerers: Callable[..., Triggerer],
        tmp_path: Path) -> None:
    """A batch watcher: its failing message is split off (held for a retry after 120 s)
    while the rest of the batch commits. (A per-message filter that raises restarts after
    the same backoff as the held message's retry, so which comes first is chance: the
    random kill test covers it.)"""
    watcher = "wm_batch"
    topic = create_topic("orders", partitions=1)
    group = f"{connection['group.id']}.{topic}"
    flag = tmp_path / "raise"
    flag.touch()
    env = {"E2E_TOPIC": topic, "E2E_WATCHERS": watcher, "E2E_RAISE_EVERY": str(FAILED_ID),
           "E2E_RAISE_FLAG": str(flag)}
    create_schema(db_url)
    # The retry of the failed message would come after 120 s: the kill comes first.
    first = write_config(tmp_path / "first.toml", database_url=db_url, connection=connection,
                         triggerer={"retry_backoff_initial": 120.0, "retry_backoff_max": 120.0})
    produce(kafka_bootstrap, topic, range(COUNT), 1)
    process = triggerers(first, MODULE, env=env).start()
    # Every id but the failing ones (0, 5, 10, 15: multiples of 5) is stored, and the
    # watermark passed them.
    expected_first = {n for n in range(COUNT) if n % FAILED_ID}
    until(lambda: set(event_ids(events(db_url), watcher)) >= expected_first,
          "the events of the messages after the failed one", 60, 0.1)
    assert state_value(db_url, watcher, "last_seen/0") == COUNT - 1
    assert committed(kafka_bootstrap, group, topic, 1)[0] <= 0  # held at id 0
    process.kill()

    flag.unlink()
    second = write_config(tmp_path / "second.toml", database_url=db_url,
                          connection=connection)
    process = triggerers(second, MODULE, env=env).start()
    until(lambda: committed(kafka_bootstrap, group, topic, 1)[0] == COUNT,
          "the commit at the end of the topic", 60, 0.1)
    process.kill()
    assert event_ids(events(db_url), watcher) == dict.fromkeys(range(COUNT), 1)
