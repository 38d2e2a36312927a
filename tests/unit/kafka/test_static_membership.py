"""Static membership (kafka/membership.py, triggerer/identity.py) on the in-memory Kafka:
which ``group.instance.id`` a consumer joins with, the slots that keep ids stable and
distinct on one host, leaving on close, and a fenced consumer's error."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError

from ledger_driver import Driver
from sharedstream.kafka.membership import (
    FenceWatch,
    InstanceFencedError,
    StaticMembership,
    fenced,
    is_fatal,
)
from sharedstream.kafka.memory import MemoryBroker
from sharedstream.kafka.memory_consumer import MemoryConsumer
from sharedstream.kafka.producer import KafkaSharedStreamProducer, StreamFailedError
from sharedstream.kafka.rejections import InMemoryRejectionRecorder
from sharedstream.triggerer.config import ProcessSettings
from sharedstream.triggerer.identity import claim_identity

pytestmark = pytest.mark.unit

T = "orders"
GROUP = "app.orders"
# librdkafka's error for a fenced static member, as consume() returns it.
FENCED = KafkaError(KafkaError._FATAL, "Fatal error: Broker: Static consumer fenced by "
                    "other consumer with same group.instance.id", fatal=False)


def test_a_connections_own_id_is_kept_and_none_is_derived_under_kip_848() -> None:
    membership = StaticMembership({GROUP: "host-0"})
    assert membership.instance_id(GROUP, {}) == "host-0"
    assert membership.instance_id(GROUP, {"group.instance.id": "mine"}) == "mine"
    assert membership.origin({"group.instance.id": "mine"}) == \
        "the connection's group.instance.id"
    assert membership.instance_id(GROUP, {"group.protocol": "consumer"}) is None
    assert membership.instance_id("other.group", {}) is None


def test_fenced_is_told_from_other_fatal_errors() -> None:
    assert is_fatal(FENCED) and fenced(FENCED)
    assert fenced(KafkaError(KafkaError.FENCED_INSTANCE_ID))
    other = KafkaError(KafkaError._FATAL, "Fatal error: something else", fatal=True)
    assert is_fatal(other) and not fenced(other)
    assert not is_fatal(KafkaError(KafkaError._TRANSPORT, "broker down"))


def test_derived_ids_take_the_lowest_free_slot_per_group(tmp_path: Path) -> None:
    settings = ProcessSettings()
    one = claim_identity(settings, [GROUP, "app.other"], lock_dir=tmp_path, host="my host")
    two = claim_identity(settings, [GROUP], lock_dir=tmp_path, host="my host")
    assert one.membership is not None and two.membership is not None
    # The host name made legal for Kafka; the second process of the group gets slot 1.
    assert dict(one.membership.instance_ids) == {GROUP: "my-host-0", "app.other": "my-host-0"}
    assert dict(two.membership.instance_ids) == {GROUP: "my-host-1"}
    one.release()  # as the kernel does when the process dies, kill -9 included
    again = claim_identity(settings, [GROUP], lock_dir=tmp_path, host="my host")
    assert again.membership is not None
    assert dict(again.membership.instance_ids) == {GROUP: "my-host-0"}
    two.release()
    again.release()


def test_a_configured_name_is_every_groups_id_and_static_membership_can_be_off(
        tmp_path: Path) -> None:
    named = claim_identity(ProcessSettings(instance_name="pod-7"), [GROUP, "app.b"],
                           lock_dir=tmp_path)
    assert named.membership is not None
    assert dict(named.membership.instance_ids) == {GROUP: "pod-7", "app.b": "pod-7"}
    assert named.membership.source == "[triggerer] instance_name"
    assert not list(tmp_path.iterdir())  # a configured name takes no slot
    off = claim_identity(ProcessSettings(static_membership=False), [GROUP],
                         lock_dir=tmp_path)
    assert off.membership is None
    with pytest.raises(ValueError, match="instance_name may hold only"):
        ProcessSettings(instance_name="pod 7")


def make(cluster: MemoryBroker, made: list[MemoryConsumer],
         membership: StaticMembership | None) -> KafkaSharedStreamProducer:
    def consumer(config: dict[str, Any]) -> MemoryConsumer:
        made.append(cluster.consumer(config))
        return made[-1]

    return KafkaSharedStreamProducer(
        topics=[T], config={"bootstrap.servers": "memory:9092", "group.id": "app"},
        recorder=InMemoryRejectionRecorder(), commit_interval=0.01, poll_timeout=0.01,
        consumer_factory=consumer, dlq_producer_factory=cluster.producer,
        topic_id_resolver=cluster.topic_ids, membership=membership)


@pytest.mark.parametrize("leave", [True, False])
async def test_a_static_member_leaves_on_close_only_when_told(leave: bool) -> None:
    cluster = MemoryBroker({T: 1})
    cluster.produce(T, b"m0")
    made: list[MemoryConsumer] = []
    producer = make(cluster, made, StaticMembership({GROUP: "host-0"}, leave_on_close=leave))
    d = Driver(producer)
    d.ack(*await d.take(1))
    await producer.aclose()
    [consumer] = made
    assert consumer.config["group.instance.id"] == "host-0"
    # Left by unsubscribing (its subscription gone) before the close, or closed only.
    assert (not consumer.subscription) is leave


async def test_a_fenced_consumer_fails_its_group_naming_the_setting() -> None:
    """librdkafka reports the fence as ``_FATAL`` with ``fatal()`` False (from
    ``consume()``; injected here through the error callback, which maps it the same
    way): it was noted as a transient error, and the group read nothing for good."""
    cluster = MemoryBroker({T: 1})
    cluster.produce(T, b"m0")
    made: list[MemoryConsumer] = []
    producer = make(cluster, made, StaticMembership({GROUP: "host-0"}))
    d = Driver(producer)
    await d.take(1)
    made[0].injected_errors.append(FENCED)
    with pytest.raises(StreamFailedError) as failed:
        await asyncio.wait_for(anext(d.stream), 5)
    cause = failed.value.__cause__
    assert isinstance(cause, InstanceFencedError), cause
    assert "group.instance.id 'host-0'" in str(cause)
    assert "[triggerer] instance_name" in str(cause)
    await producer.aclose()


def test_one_fence_rebuilds_the_group_a_second_within_the_window_is_a_twin() -> None:
    """After a lost session (a broker restart) librdkafka fences a member by its own stale
    request: that must not stop the process (the fault suite's broker restart did). A
    second fence of the group soon after is another live process with the identity."""
    now = [0.0]
    watch = FenceWatch(60.0, lambda: now[0])

    def fence(group: str = GROUP) -> InstanceFencedError:
        return InstanceFencedError("fenced", group, "host-0")

    first = fence()
    assert not watch.twin(first)
    assert not watch.twin(first)  # each watcher of the group reports the same fence
    now[0] = 61.0
    assert not watch.twin(fence())  # a minute on: a lost session again, not a twin
    now[0] = 70.0
    assert not watch.twin(fence("app.other"))  # groups are told apart
    assert watch.twin(fence())
