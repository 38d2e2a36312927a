"""Back in seconds after a crash, with default settings (issue 43, static membership).

Each test runs ``sharedstream run`` processes on the shared broker with a connection of
only ``bootstrap.servers`` and ``group.id``: the broker's default session timeout (45 s)
is what a dead member holds its partitions for, so a restart that waits for it fails
the bound. The figures each test measured are printed (``pytest -s`` shows them).

* kill -9, then a start in its place: the new process joins as the same static member
  and consumes again within seconds (it idled 45 s before static membership);
* SIGTERM, then a start: it left the group, so the start joins afresh, as quickly;
* a scale-down: the process stopped leaves, so the one left takes its partitions at once;
* two live processes given one ``instance_name``: they fence each other; the older,
  fenced twice within a minute, stops with one ``error:`` line naming the setting (one
  fence alone rebuilds the group: a process fences itself after a lost session);
* without static membership, a restart after kill -9 waits for the dead member's
  session (a short one here): the log and ``/status`` say so, and for how long.
"""

from __future__ import annotations

import json
import re
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streams import event_count, produce
from triggerer import Triggerer, until, write_config

PARTITIONS = 3
BOUND_S = 15.0  # well under the 45 s session timeout: only static membership meets it


def default_connection(kafka_bootstrap: str) -> dict[str, Any]:
    """What a user writes: no session timeout, no instance id."""
    return {"bootstrap.servers": kafka_bootstrap,
            "group.id": f"restart-{uuid.uuid4().hex[:8]}"}


def first_event_after(process: Triggerer, db: str, kafka_bootstrap: str, topic: str,
                      before: int, ids: range) -> float:
    """Start ``process``, produce ``ids``, and the seconds from the start to the first of
    their events persisted (the database held ``before`` events of ``everything``)."""
    started = time.monotonic()
    process.start()
    produce(kafka_bootstrap, topic, ids, PARTITIONS)
    until(lambda: event_count(db, "everything") > before, "an event after the restart",
          timeout=90, interval=0.05)
    return time.monotonic() - started


def test_a_restart_after_kill_9_consumes_again_within_seconds(
        tmp_path: Path, kafka_bootstrap: str, create_topic: Callable[..., str],
        triggerers: Callable[..., Triggerer]) -> None:
    topic = create_topic("restart", partitions=PARTITIONS)
    db = f"sqlite:///{tmp_path / 'state.db'}"
    config = write_config(tmp_path / "sharedstream.toml", database_url=db,
                          connection=default_connection(kafka_bootstrap))
    process = triggerers(config, env={"E2E_TOPIC": topic, "E2E_WATCHERS": "everything"})
    process.start().wait_ready()
    produce(kafka_bootstrap, topic, range(30), PARTITIONS)
    until(lambda: event_count(db, "everything") == 30, "30 events")

    process.kill()
    after_kill = first_event_after(process, db, kafka_bootstrap, topic, 30, range(30, 60))
    print(f"\nfirst event {after_kill:.2f} s after the start that followed kill -9")
    assert after_kill < BOUND_S, after_kill
    until(lambda: event_count(db, "everything") == 60, "60 events")
    # The same slot of this host, so the same static member as the process killed.
    assert re.search(r"1 watcher: everything, static member '[^']+-0'", process.log())
    assert "waiting for partitions" not in process.log(), process.log()[-3000:]

    process.signal(signal.SIGTERM)
    assert process.wait() == 0
    after_stop = first_event_after(process, db, kafka_bootstrap, topic, 60, range(60, 90))
    print(f"first event {after_stop:.2f} s after the start that followed SIGTERM")
    assert after_stop < BOUND_S, after_stop


def test_a_scale_down_hands_the_partitions_over_at_once(
        tmp_path: Path, kafka_bootstrap: str, create_topic: Callable[..., str],
        triggerers: Callable[..., Triggerer]) -> None:
    """A static member never leaves by itself: without ``leave_group_on_shutdown`` the
    partitions of a process stopped for good would idle for the session timeout."""
    topic = create_topic("scale", partitions=PARTITIONS)
    db = f"sqlite:///{tmp_path / 'state.db'}"
    config = write_config(tmp_path / "sharedstream.toml", database_url=db,
                          connection=default_connection(kafka_bootstrap))
    env = {"E2E_TOPIC": topic, "E2E_WATCHERS": "everything"}
    first, second = triggerers(config, env=env), triggerers(config, env=env)
    first.start().wait_ready()
    second.start().wait_ready()
    # Two processes of one module on one host: two slots, so two static members.
    assert "static member" in first.log() and "static member" in second.log()
    second.wait_log(r": assigned \S")  # the group rebalanced over both
    first.signal(signal.SIGTERM)
    assert first.wait() == 0
    stopped = time.monotonic()
    produce(kafka_bootstrap, topic, range(PARTITIONS * 10), PARTITIONS)
    until(lambda: event_count(db, "everything") == PARTITIONS * 10,
          "every partition's messages, through the process left", timeout=90)
    took = time.monotonic() - stopped
    print(f"\nevery partition consumed {took:.2f} s after the other process stopped")
    assert took < BOUND_S, took


def test_two_live_processes_with_one_instance_name_stop_the_older_with_an_error(
        tmp_path: Path, kafka_bootstrap: str, create_topic: Callable[..., str],
        triggerers: Callable[..., Triggerer]) -> None:
    topic = create_topic("twins", partitions=PARTITIONS)
    config = write_config(tmp_path / "sharedstream.toml",
                          database_url=f"sqlite:///{tmp_path / 'state.db'}",
                          connection=default_connection(kafka_bootstrap),
                          triggerer={"instance_name": "twin"})
    env = {"E2E_TOPIC": topic, "E2E_WATCHERS": "everything"}
    older, newer = triggerers(config, env=env), triggerers(config, env=env)
    older.start().wait_ready()
    newer.start().wait_ready()
    assert older.wait(60) == 2
    errors = [line for line in older.log().splitlines() if line.startswith("error:")]
    assert len(errors) == 1, older.log()[-3000:]
    assert "group.instance.id 'twin'" in errors[0] and "[triggerer] instance_name" in errors[0]
    assert "fenced" in errors[0], errors[0]
    assert newer.running() and newer.get("/livez")[0] == 200


def test_without_static_membership_the_wait_for_a_dead_member_is_said(
        tmp_path: Path, kafka_bootstrap: str, create_topic: Callable[..., str],
        triggerers: Callable[..., Triggerer]) -> None:
    """The broker keeps a dead member's partitions until its session times out (10 s
    here): the restarted process says so in its log and its ``/status``, then how long
    it waited."""
    topic = create_topic("dynamic", partitions=PARTITIONS)
    db = f"sqlite:///{tmp_path / 'state.db'}"
    connection = {**default_connection(kafka_bootstrap), "session.timeout.ms": 10000}
    config = write_config(tmp_path / "sharedstream.toml", database_url=db,
                          connection=connection, triggerer={"static_membership": False})
    process = triggerers(config, env={"E2E_TOPIC": topic, "E2E_WATCHERS": "everything"})
    process.start().wait_ready()
    process.wait_log(r": assigned \S")
    assert "static member" not in process.log()
    process.kill()
    process.start()

    def waiting() -> dict[str, Any] | None:
        status, body = process.get("/status")
        if status != 200:
            return None
        [group] = json.loads(body)["groups"] or [None]
        return group["waiting_for_partitions"] if group else None

    seen = until(waiting, "/status saying it waits for partitions", timeout=30)
    assert seen["session_timeout_s"] == 10.0 and seen["seconds"] >= 0, seen
    line = process.wait_log(r"waiting for partitions for \d+s: the broker still assigns "
                            r"them to a previous member .*session\.timeout\.ms, 10s",
                            timeout=30)
    assert line
    waited = float(process.wait_log(r"partitions assigned after waiting ([\d.]+)s",
                                    timeout=60).group(1))
    print(f"\nwaited {waited:.1f} s for the dead member's 10 s session")
    assert 5.0 <= waited <= 30.0, waited
    until(lambda: waiting() is None, "/status no longer waiting")
