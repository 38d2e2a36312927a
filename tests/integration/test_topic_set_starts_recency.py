"""Issue 25.4 acceptance findings on the real broker and database.

F1: ``check`` (and ``run``, which plans the same way) and ``offsets show`` must agree on
which groups are left behind: another module's watcher whose latest recorded group is
live on the same ``group.id`` is not left behind.
F2: going back to an earlier topic set continues each topic from where these watchers
read it last, not from the returning group's own stale commit.

The old groups are committed by a plain confluent-kafka consumer and recorded in
``stream_group`` as the triggerer records them, so the answers are judged against the
broker's, not against the product's own writer.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from test_offsets_commands import commit, produce
from test_topic_set_starts import MODULE

from sharedstream.cli import cli
from sharedstream.kafka.progress import decode_progress, encode_progress
from sharedstream.statestore.models import stream_group
from sharedstream.statestore.store import StateStore
from sharedstream.triggerer import group_starts
from sharedstream.triggerer.config import load_config
from sharedstream.triggerer.plan import make_plan

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def setup(db_url: str, kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
          ) -> tuple[str, Path, str]:
    """(group.id, config file, database url) for connection ``e2e``, the module's, on
    each database."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SHAREDSTREAM_CONFIG", raising=False)
    group_id = f"recency-{uuid.uuid4().hex[:8]}"
    config = tmp_path / "sharedstream.toml"
    config.write_text(f'[database]\nurl = "{db_url}"\n\n[connections.e2e]\n'
                      f'"bootstrap.servers" = "{kafka_bootstrap}"\n"group.id" = "{group_id}"\n')
    with StateStore.from_url(db_url) as store:
        store.upgrade()
    return group_id, config, db_url


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


def record(url: str, key: str, group: str, watchers: list[str], minutes: int) -> None:
    """A ``stream_group`` row as a start ``minutes`` after T0 wrote it."""
    with StateStore.from_url(url) as store, store.engine.begin() as connection:
        connection.execute(stream_group.insert(), [{
            "group_key": key, "consumer_group": group, "watchers": json.dumps(watchers),
            "updated_at": T0 + timedelta(minutes=minutes)}])


def test_another_modules_latest_group_is_not_left_behind_by_any_command(
        setup: tuple[str, Path, str], kafka_bootstrap: str,
        create_topic: Callable[..., str], tmp_path: Path) -> None:
    group_id, config, url = setup
    orders, framed, stale = create_topic("orders"), create_topic("framed"), create_topic("old")
    produce(kafka_bootstrap, framed, {0: 3})
    produce(kafka_bootstrap, stale, {0: 3})
    other, old = f"{group_id}.{framed}", f"{group_id}.{stale}"
    # Deployment 2's watcher moved from [old] to [framed]: [old] is left behind, [framed]
    # is its live group. Deployment 1 (the module) reads [orders] with watcher "reader".
    commit(kafka_bootstrap, old, [TopicPartition(stale, 0, 3)])
    commit(kafka_bootstrap, other, [TopicPartition(framed, 0, 2)])
    record(url, "old", old, ["framed"], 1)
    record(url, "framed", other, ["framed"], 2)
    env = {"E2E_TOPICS": orders, "E2E_HANDOUTS": str(tmp_path)}

    checked = invoke("check", str(MODULE), "--config", str(config), env=env)
    assert checked.exit_code == 0, checked.output
    behind = [line for line in checked.stdout.splitlines() if "left behind:" in line]
    assert len(behind) == 1 and f"left behind: {old} " in behind[0], checked.stdout

    ours = f"{group_id}.{orders}"
    commit(kafka_bootstrap, ours, [TopicPartition(orders, 0, 0)])
    shown = invoke("offsets", "show", "--group", ours, "--connection", "e2e",
                   "--config", str(config), "--json")
    assert shown.exit_code == 0, shown.output
    assert [g["group"] for g in json.loads(shown.stdout)["left_behind"]] == [old]


def test_a_return_to_an_earlier_topic_set_continues_where_the_watchers_read_last(
        setup: tuple[str, Path, str], kafka_bootstrap: str,
        kafka_admin: AdminClient, create_topic: Callable[..., str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    group_id, config, url = setup
    a, b = create_topic("a"), create_topic("b")
    produce(kafka_bootstrap, a, {0: 10})
    produce(kafka_bootstrap, b, {0: 10})
    only_a, both, only_b = f"{group_id}.{a}", f"{group_id}.{a}+{b}", f"{group_id}.{b}"
    # [A] -> [A,B] -> [B], and now back to [A,B]: B's own commit in [A,B] is stale.
    commit(kafka_bootstrap, only_a, [TopicPartition(a, 0, 5)])
    commit(kafka_bootstrap, both, [TopicPartition(a, 0, 7), TopicPartition(b, 0, 3)])
    commit(kafka_bootstrap, only_b, [TopicPartition(b, 0, 4, encode_progress(4, [6]))])
    record(url, "a", only_a, ["reader"], 1)
    record(url, "ab", both, ["reader"], 2)
    record(url, "b", only_b, ["reader"], 3)
    env = {"E2E_TOPICS": f"{a},{b}", "E2E_HANDOUTS": str(tmp_path)}

    checked = invoke("check", str(MODULE), "--config", str(config), env=env)
    assert checked.exit_code == 0, checked.output
    assert f"group {both}: {a}: committed offsets of this group" in checked.stdout, \
        checked.stdout
    assert (f"group {both}: {b}: continues from group {only_b}, where these watchers read "
            "it last") in checked.stdout, checked.stdout

    # What `run` does before any consumer subscribes.
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    loaded = load_config(config)
    plan = make_plan(loaded, [str(MODULE)])
    with StateStore.from_url(url) as store:
        group_starts.start_groups(plan.groups, store, loaded.process.broker_timeout, takeover=False)
    offsets = {(tp.topic, tp.offset, frozenset(decode_progress(tp.offset, tp.metadata)))
               for tp in _committed(kafka_admin, both)}
    assert offsets == {(a, 7, frozenset()), (b, 4, frozenset({6}))}  # progress copied too

    again = invoke("check", str(MODULE), "--config", str(config), env=env)
    assert again.exit_code == 0, again.output
    assert f"group {both}: {b}: committed offsets of this group" in again.stdout, again.stdout


def _committed(admin: AdminClient, group: str) -> list[TopicPartition]:
    result = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])[group].result(timeout=10)
    return [tp for tp in result.topic_partitions if tp.offset >= 0]



def test_a_start_is_recorded_after_every_earlier_one_whatever_the_hosts_clock(
        setup: tuple[str, Path, str], kafka_bootstrap: str,
        create_topic: Callable[..., str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    group_id, config, url = setup
    a, b = create_topic("a"), create_topic("b")
    produce(kafka_bootstrap, b, {0: 10})
    only_b, both = f"{group_id}.{b}", f"{group_id}.{a}+{b}"
    # The [B] start ran on a host whose clock is a day ahead of this one.
    commit(kafka_bootstrap, only_b, [TopicPartition(b, 0, 4)])
    record(url, "b", only_b, ["reader"], int((datetime.now(UTC) - T0).total_seconds() // 60)
           + 24 * 60)
    env = {"E2E_TOPICS": f"{a},{b}", "E2E_HANDOUTS": str(tmp_path)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    loaded = load_config(config)
    with StateStore.from_url(url) as store:
        group_starts.start_groups(make_plan(loaded, [str(MODULE)]).groups, store,
                                  loaded.process.broker_timeout, takeover=False)
    commit(kafka_bootstrap, both, [TopicPartition(b, 0, 8)])  # [A,B] read on from 4

    again = invoke("check", str(MODULE), "--config", str(config), env=env)
    assert again.exit_code == 0, again.output
    assert f"group {both}: {b}: committed offsets of this group" in again.stdout, again.stdout
