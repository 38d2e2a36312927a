"""Horizontal scaling under churn: 3 triggerers in one group on 12 partitions.

While messages flow (paced, for the whole run), each cycle kills one member with
SIGKILL, starts a replacement, stops another with SIGTERM (it must exit 0) and starts
its replacement, so partitions move between members by crash and by revoke. Each kill
must land on work in flight: the watchers write down what they are handed, and the
victim must have been handed messages its group's commit did not cover yet. A group
commits within milliseconds once it has nothing in flight, so a kill timed by a hand-out
alone may find everything committed; the victim is frozen (SIGSTOP: it commits nothing
more) and killed only when the committed offsets, settled, leave some of what it was
handed uncovered; else it runs on to its next hand-out. SIGKILL on a frozen process is
still a kill -9: none of its shutdown runs.
Afterwards every expected event exists exactly once (rows counted in PostgreSQL),
every rejected message has a DLQ record (duplicate records from a crash are allowed by
guarantee 6, counted and reported) and no process logged a failed commit.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faultkit import Figures, Size, dead_letters, duplicates, log_lines, wait_committed_end
from streams import committed_messages, create_schema, event_ids, events, produce
from triggerer import ORDERS, Triggerer, until, write_config

PARTITIONS = 12
MEMBERS = 3
BURST = 100  # messages every 50 ms: about 2,000 messages/s while the cycles run


def handed_by(record: Path, member: Triggerer) -> set[tuple[int, int]]:
    """(partition, offset) of every message ``member``'s watchers were handed."""
    path = record / f"{member.pid}.log"
    if not path.exists():
        return set()
    return {(int(p), int(o)) for _, p, o in (line.split() for line in
                                             path.read_text().splitlines())}


def settled_commits(bootstrap: str, group: str, topic: str) -> set[tuple[int, int]]:
    """What the group's commit covers, read until two reads 50 ms apart agree: a commit
    a frozen member sent just before it stopped still lands."""
    found = committed_messages(bootstrap, group, topic, PARTITIONS)
    while True:
        time.sleep(0.05)
        again = committed_messages(bootstrap, group, topic, PARTITIONS)
        if again == found:
            return found
        found = again


def freeze_on_work_in_flight(victim: Triggerer, record: Path, bootstrap: str, group: str,
                             topic: str) -> None:
    """Leave ``victim`` frozen (SIGSTOP) at a moment its watchers hold messages the
    group's commit does not cover: after each new hand-out, freeze it and look; resume it
    when everything it was handed is committed."""
    deadline = time.monotonic() + 120
    while True:
        seen = len(handed_by(record, victim))
        until(lambda v=victim, n=seen: len(handed_by(record, v)) > n,
              "the victim being handed new messages", 60, 0.02)
        victim.signal(signal.SIGSTOP)
        if handed_by(record, victim) - settled_commits(bootstrap, group, topic):
            return
        victim.signal(signal.SIGCONT)
        assert time.monotonic() < deadline, "no hand-out left work uncommitted for 120 s"


def test_three_members_killed_started_and_stopped_lose_and_duplicate_nothing(
        pg_url: str, kafka_bootstrap: str, create_topic: Callable[..., str],
        connection: dict[str, Any], triggerers: Callable[..., Triggerer], tmp_path: Path,
        size: Size, figures: Figures) -> None:
    cycles = size.pick(3, 12)
    topic = create_topic("scale", partitions=PARTITIONS)
    dlq = create_topic("scale-dlq")
    group = f"{connection['group.id']}.{topic}"
    create_schema(pg_url)
    # A member stopped with SIGTERM leaves through a rebalance, which waits for the group
    # to evict the member just killed: up to its session timeout (6 s in
    # connection_for), three times a run. 3 s, still three heartbeats, halves that wait.
    config = write_config(tmp_path / "sharedstream.toml", database_url=pg_url,
                          connection={**connection, "session.timeout.ms": 3000})
    record = tmp_path / "handouts"
    record.mkdir()
    env = {"E2E_TOPIC": topic, "E2E_DLQ": dlq, "E2E_WATCHERS": "everything,picky",
           "E2E_HANDOUTS": str(record)}
    pool = [triggerers(config, ORDERS, env=env).start() for _ in range(MEMBERS)]
    for member in pool:
        member.wait_ready()
    everyone = list(pool)
    # Paced traffic for as long as the cycles run, so every kill lands mid-stream.
    stop = threading.Event()
    sent = [0]

    def traffic() -> None:
        while not stop.is_set():
            produce(kafka_bootstrap, topic, range(sent[0], sent[0] + BURST), PARTITIONS)
            sent[0] += BURST
            stop.wait(0.05)

    producer = threading.Thread(target=traffic)
    producer.start()
    rng = random.Random(9)
    kills = stops = 0
    uncommitted_at_kills: list[int] = []
    for _ in range(cycles):
        victim = pool.pop(rng.randrange(len(pool)))
        # A member that just joined may own no partition yet: kill it only once it is
        # being handed messages, frozen while some of them are not committed.
        freeze_on_work_in_flight(victim, record, kafka_bootstrap, group, topic)
        victim.kill()
        covered = committed_messages(kafka_bootstrap, group, topic, PARTITIONS)
        uncommitted_at_kills.append(len(handed_by(record, victim) - covered))
        kills += 1
        newcomer = triggerers(config, ORDERS, env=env).start()
        everyone.append(newcomer)
        newcomer.wait_ready()
        pool.append(newcomer)
        leaver = pool.pop(rng.randrange(len(pool)))
        leaver.signal(signal.SIGTERM)
        assert leaver.wait(60) == 0, leaver.log()[-4000:]
        stops += 1
        newcomer = triggerers(config, ORDERS, env=env).start()
        everyone.append(newcomer)
        newcomer.wait_ready()
        pool.append(newcomer)
    stop.set()
    producer.join(300)
    assert not producer.is_alive()
    count = sent[0]
    last_fault = time.monotonic()
    wait_committed_end(kafka_bootstrap, group, topic, PARTITIONS, size.pick(180, 900))
    recovered = time.monotonic() - last_fault
    for member in pool:
        member.signal(signal.SIGTERM)
    for member in pool:
        assert member.wait(60) == 0, member.log()[-4000:]

    found = events(pg_url)
    everything, picky = event_ids(found, "everything"), event_ids(found, "picky")
    rejected = {n for n in range(count) if n % 100 == 7}
    kept_by_picky = set(range(count)) - rejected
    lost = (len(set(range(count)) - set(everything))
            + len(kept_by_picky - set(picky)))
    duplicate_events = sum(n - 1 for n in everything.values()) + sum(
        n - 1 for n in picky.values())
    records = dead_letters(kafka_bootstrap, dlq)
    dead_offsets = {(r.partition, r.offset) for r in records}
    rejected_coordinates = {(n % PARTITIONS, n // PARTITIONS) for n in rejected}
    commit_errors = [line for member in everyone for line in log_lines(member, "commit failed")]
    figures.record("horizontal scaling (3 members, kill -9 / start / SIGTERM)",
                   messages=count, faults=kills + stops,
                   lost=lost + len(rejected_coordinates - dead_offsets),
                   duplicates=duplicate_events, recover_seconds=recovered,
                   kills=kills, graceful_stops=stops, processes=len(everyone),
                   dlq_records=len(records),
                   dlq_duplicate_records=duplicates(r.identity for r in records),
                   uncommitted_at_kills=uncommitted_at_kills)
    # Each kill landed on work in flight: handed out to the victim, not committed.
    assert all(n > 0 for n in uncommitted_at_kills), uncommitted_at_kills
    assert set(everything) == set(range(count)) and set(picky) == kept_by_picky
    assert duplicate_events == 0
    assert dead_offsets == rejected_coordinates
    assert all(r.watchers == {"picky"} for r in records)
    assert commit_errors == []
