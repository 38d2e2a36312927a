"""Issue 25.4 acceptance (F2): going back to an earlier topic set hands nothing out again.

The watcher reads ``[a]``, then ``[a, b]``, then ``[b]``, then ``[a, b]`` again, each run
until its group committed everything. On the return, the ``[a, b]`` group's own commit
of ``b`` is stale (the ``[b]`` group read further): ``b`` must continue from ``[b]``,
and every message of either topic is handed out exactly once over the four runs.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streams import end_offsets, produce
from test_topic_set_change import MODULE, all_committed, handouts
from triggerer import Triggerer, run_cli, until, write_config


def test_a_return_to_an_earlier_topic_set_hands_nothing_out_again(
        sqlite_url: str, kafka_bootstrap: str, create_topic: Callable[..., str],
        connection: dict[str, Any], triggerers: Callable[..., Triggerer],
        tmp_path: Path) -> None:
    a, b = create_topic("a", partitions=1), create_topic("b", partitions=1)
    base = connection["group.id"]
    record = tmp_path / "handouts"
    record.mkdir()
    config = write_config(tmp_path / "sharedstream.toml", database_url=sqlite_url,
                          connection=connection)

    def run(topics: list[str], produced: dict[str, range]) -> None:
        for topic, values in produced.items():
            produce(kafka_bootstrap, topic, values, 1)
        group = f"{base}.{'+'.join(sorted(topics))}"
        env = {"E2E_HANDOUTS": str(record), "E2E_TOPICS": ",".join(topics)}
        triggerer = triggerers(config, MODULE, env=env)
        triggerer.start()
        until(lambda: all(all_committed(kafka_bootstrap, group, t, 1) for t in topics),
              f"{group} committed every message", 90)
        triggerer.signal(signal.SIGTERM)
        assert triggerer.wait(60) == 0

    run([a], {a: range(5)})
    run([a, b], {a: range(5, 7), b: range(3)})
    run([b], {b: range(3, 4)})
    both = {"E2E_HANDOUTS": str(record), "E2E_TOPICS": f"{a},{b}"}
    produce(kafka_bootstrap, b, range(4, 5), 1)
    check = run_cli(["check", str(MODULE), "--config", str(config)], cwd=tmp_path, env=both)
    assert check.returncode == 0, check.stderr
    assert (f"{b}: continues from group {base}.{b}, where these watchers read it last"
            in check.stdout), check.stdout
    run([a, b], {})

    counts = handouts(record)
    assert [k for k, n in counts.items() if n > 1] == []
    every = {(t, 0, o) for t in (a, b) for o in range(end_offsets(kafka_bootstrap, t, 1)[0])}
    assert set(counts) == every
