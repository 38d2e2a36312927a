"""Issue 25.4 on the real broker: a group whose topic set changed, when the groups it
could continue from disagree, and ``offsets delete`` while a group is live.

The old groups are committed by a plain confluent-kafka consumer and recorded in
``stream_group`` as the triggerer records them, so ``check`` is judged against the
broker's answers, not against the product's own writer.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from test_offsets_commands import commit, live_member, produce

from sharedstream.cli import cli
from sharedstream.statestore.models import stream_group
from sharedstream.statestore.store import StateStore

MODULE = Path(__file__).resolve().parents[1] / "e2e" / "watchers" / "topic_set.py"
ONE_START = datetime(2026, 1, 1, tzinfo=UTC)


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


@pytest.fixture
def setup(kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
          ) -> tuple[str, Path, str]:
    """(group.id, config file, database url) for connection ``e2e``, the module's."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SHAREDSTREAM_CONFIG", raising=False)
    group_id = f"sets-{uuid.uuid4().hex[:8]}"
    url = f"sqlite:///{tmp_path / 'state.db'}"
    config = tmp_path / "sharedstream.toml"
    config.write_text(f'[database]\nurl = "{url}"\n\n[connections.e2e]\n'
                      f'"bootstrap.servers" = "{kafka_bootstrap}"\n"group.id" = "{group_id}"\n')
    with StateStore.from_url(url) as store:
        store.upgrade()
    return group_id, config, url


def record(url: str, key: str, group: str, watchers: list[str]) -> None:
    """A ``stream_group`` row, as ``sharedstream run`` writes one for each group; all at
    one instant, as one start records its groups (so recency cannot tell them apart)."""
    with StateStore.from_url(url) as store, store.engine.begin() as connection:
        connection.execute(stream_group.insert(), [{
            "group_key": key, "consumer_group": group, "watchers": json.dumps(watchers),
            "updated_at": ONE_START}])


def test_groups_that_disagree_refuse_the_start_until_one_is_deleted(
        setup: tuple[str, Path, str], kafka_bootstrap: str, kafka_admin: AdminClient,
        create_topic: Callable[..., str], tmp_path: Path) -> None:
    group_id, config, url = setup
    orders, refunds = create_topic("orders"), create_topic("refunds")
    produce(kafka_bootstrap, orders, {0: 30})
    one, two = f"{group_id}.{orders}", f"{group_id}.{orders}+{refunds}"
    commit(kafka_bootstrap, one, [TopicPartition(orders, 0, 10)])
    commit(kafka_bootstrap, two, [TopicPartition(orders, 0, 25)])
    record(url, "one", one, ["reader"])
    record(url, "two", two, ["reader", "other"])
    # The module now reads [orders, payments]: a new group, which both old ones fed.
    env = {"E2E_TOPICS": f"{orders},{create_topic('payments')}", "E2E_HANDOUTS": str(tmp_path)}

    refused = invoke("check", str(MODULE), "--config", str(config), env=env)
    assert refused.exit_code == 2, refused.output
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert f"{orders}[0]: {one} at 10, {two} at 25" in errors[0], errors[0]
    assert "sharedstream offsets delete --group" in errors[0], errors[0]

    deleted = invoke("offsets", "delete", "--group", one, "--connection", "e2e",
                     "--config", str(config), "--yes", "--json")
    assert deleted.exit_code == 0, deleted.output
    assert json.loads(deleted.stdout) == {"group": one, "dry_run": False, "deleted": True,
                                          "partitions": 1}
    listed = kafka_admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(one)])[one].result(timeout=10)
    assert [tp for tp in listed.topic_partitions if tp.offset >= 0] == []
    checked = invoke("check", str(MODULE), "--config", str(config), env=env)
    assert checked.exit_code == 0, checked.output
    assert f"{orders}: continues from group {two}, where these watchers read it last" in \
        checked.stdout


def test_delete_is_refused_while_the_group_has_a_live_member_and_asks_first(
        setup: tuple[str, Path, str], kafka_bootstrap: str, kafka_admin: AdminClient,
        create_topic: Callable[..., str]) -> None:
    group_id, config, _ = setup
    orders = create_topic("orders")
    produce(kafka_bootstrap, orders, {0: 3})
    group = f"{group_id}.{orders}"
    commit(kafka_bootstrap, group, [TopicPartition(orders, 0, 2)])
    base = ["offsets", "delete", "--group", group, "--connection", "e2e", "--config",
            str(config)]
    with live_member(kafka_bootstrap, group, orders):
        refused = invoke(*base, "--yes")
    assert refused.exit_code == 1, refused.output
    assert "1 live member(s)" in refused.stderr and refused.stderr.count("\n") == 1

    declined = CliRunner().invoke(cli, base, input="n\n")
    assert declined.exit_code == 1 and "Aborted" in declined.output
    dry = invoke(*base, "--dry-run")
    assert dry.exit_code == 0 and "dry run, nothing deleted" in dry.stdout
    listed = kafka_admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])[group].result(timeout=10)
    assert [(tp.partition, tp.offset) for tp in listed.topic_partitions] == [(0, 2)]

    missing = invoke("offsets", "delete", "--group", f"{group_id}.nothing", "--connection",
                     "e2e", "--config", str(config), "--yes")
    assert missing.exit_code == 1 and "not found" in missing.stderr
