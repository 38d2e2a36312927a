"""Issue 25.4: a watcher module whose topic set changed never re-reads retention silently.

A watcher on ``[orders]`` reads and commits; the module then watches ``[orders,
payments]``, a new consumer group. The new run must continue orders where the old group
committed (counted in hand-outs by identity: an event's unique key would hide a second
hand-out) and read payments from the start; ``check`` and the start-up log say so per
topic; the old group is then reported as left behind, with the command that removes it.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient
from streams import committed, end_offsets, produce
from triggerer import WATCHERS, Triggerer, run_cli, until, write_config

MODULE = WATCHERS / "topic_set.py"
ORDERS_PARTITIONS = 2


def handouts(directory: Path) -> Counter[tuple[str, int, int]]:
    """How often the watcher was handed each (topic, partition, offset), over all runs."""
    counts: Counter[tuple[str, int, int]] = Counter()
    for path in directory.glob("*.log"):
        for line in path.read_text().splitlines():
            topic, partition, offset = line.split()
            counts[(topic, int(partition), int(offset))] += 1
    return counts


def all_committed(bootstrap: str, group: str, topic: str, partitions: int) -> bool:
    return committed(bootstrap, group, topic, partitions) == end_offsets(bootstrap, topic,
                                                                         partitions)


def test_a_changed_topic_set_continues_where_the_old_group_was(
        sqlite_url: str, kafka_bootstrap: str, kafka_admin: AdminClient,
        create_topic: Callable[..., str], connection: dict[str, Any],
        triggerers: Callable[..., Triggerer], tmp_path: Path) -> None:
    orders = create_topic("orders", partitions=ORDERS_PARTITIONS)
    payments = create_topic("payments", partitions=1)
    base = connection["group.id"]
    old_group, new_group = f"{base}.{orders}", f"{base}.{'+'.join(sorted([orders, payments]))}"
    record = tmp_path / "handouts"
    record.mkdir()
    config = write_config(tmp_path / "sharedstream.toml", database_url=sqlite_url,
                          connection=connection)
    env = {"E2E_HANDOUTS": str(record)}

    produce(kafka_bootstrap, orders, range(40), ORDERS_PARTITIONS)
    produce(kafka_bootstrap, payments, range(10), 1)
    first = triggerers(config, MODULE, env={**env, "E2E_TOPICS": orders})
    first.start()
    until(lambda: all_committed(kafka_bootstrap, old_group, orders, ORDERS_PARTITIONS),
          "the [orders] group committed every orders message", 90)
    first.signal(signal.SIGTERM)
    assert first.wait(60) == 0
    read_first = {(t, p, o) for t, p, o in handouts(record)}
    assert {t for t, _, _ in read_first} == {orders} and len(read_first) == 40

    # Written after the first run: the new run must hand out these and only these of orders.
    produce(kafka_bootstrap, orders, range(40, 60), ORDERS_PARTITIONS)
    both = {**env, "E2E_TOPICS": f"{orders},{payments}"}
    check = run_cli(["check", str(MODULE), "--config", str(config)], cwd=tmp_path, env=both)
    assert check.returncode == 0, check.stderr
    assert (f"{orders}: continues from group {old_group}, where these watchers read it "
            "last (topic set changed)") in check.stdout, check.stdout
    assert (f"{payments}: no committed offset, starts at earliest (auto.offset.reset)"
            in check.stdout), check.stdout

    second = triggerers(config, MODULE, env=both)
    second.start()
    second.wait_log(f"{orders}: continues from group {old_group}, where these watchers")
    until(lambda: all_committed(kafka_bootstrap, new_group, orders, ORDERS_PARTITIONS)
          and all_committed(kafka_bootstrap, new_group, payments, 1),
          "the new group committed every orders and payments message", 90)
    second.signal(signal.SIGTERM)
    assert second.wait(60) == 0
    counts = handouts(record)
    assert max(counts.values()) == 1, [k for k, n in counts.items() if n > 1][:10]
    read_second = set(counts) - read_first
    ends = end_offsets(kafka_bootstrap, orders, ORDERS_PARTITIONS)
    every_order = {(orders, p, o) for p, end in ends.items() for o in range(end)}
    assert {k for k in read_second if k[0] == orders} == every_order - read_first
    assert {k for k in read_second if k[0] == payments} == {(payments, 0, o) for o in range(10)}

    again = run_cli(["check", str(MODULE), "--config", str(config)], cwd=tmp_path, env=both)
    assert again.returncode == 0, again.stderr
    assert f"{orders}: committed offsets of this group" in again.stdout, again.stdout
    assert f"{payments}: committed offsets of this group" in again.stdout, again.stdout
    command = f"sharedstream offsets delete --group {old_group}"
    assert f"left behind: {old_group}" in again.stdout and command in again.stdout, again.stdout

    shown = run_cli(["offsets", "show", "--group", new_group, "--connection", "e2e",
                     "--config", str(config)], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert old_group in shown.stdout and command in shown.stdout, shown.stdout
    data = json.loads(run_cli(["offsets", "show", "--group", new_group, "--connection", "e2e",
                               "--config", str(config), "--json"], cwd=tmp_path).stdout)
    assert [(g["group"], g["command"]) for g in data["left_behind"]] == [(old_group, command)]

    removed = run_cli(["offsets", "delete", "--group", old_group, "--connection", "e2e",
                       "--config", str(config), "--yes"], cwd=tmp_path)
    assert removed.returncode == 0, removed.stderr
    listed = kafka_admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(old_group)])[old_group].result(timeout=10)
    assert [tp for tp in listed.topic_partitions if tp.offset >= 0] == []
    after = json.loads(run_cli(["offsets", "show", "--group", new_group, "--connection", "e2e",
                                "--config", str(config), "--json"], cwd=tmp_path).stdout)
    assert after["left_behind"] == []
