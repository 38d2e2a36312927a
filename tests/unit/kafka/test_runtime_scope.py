"""Each triggerer of a process keeps its own Kafka runtime and schema registries (issue 41,
3.9): set in its task's context, seen by the tasks and worker threads it starts, by no
other triggerer's, and not by code outside any triggerer (which sees the process's)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from sharedstream.kafka.rejections import InMemoryRejectionRecorder
from sharedstream.kafka.runtime import (
    KafkaRuntime,
    configure_kafka_runtime,
    kafka_runtime,
    use_kafka_runtime,
)
from sharedstream.serde.lookups import RegistryFigures, SchemaRegistryUnavailable
from sharedstream.serde.registries import (
    configure_schema_registries,
    registry_client,
    registry_figures,
    registry_problems,
    use_schema_registries,
)

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def process_defaults() -> Iterator[None]:
    before = kafka_runtime()
    configure_kafka_runtime({"process": {"bootstrap.servers": "p:9092"}}, None)
    configure_schema_registries({})
    yield
    configure_kafka_runtime(before.connections, before.recorder, before.environ)
    configure_schema_registries({})


async def test_each_triggerer_task_sees_its_own_kafka_runtime() -> None:
    recorders = {name: InMemoryRejectionRecorder() for name in ("a", "b")}
    seen: dict[str, list[KafkaRuntime]] = {}
    started = asyncio.Event()

    async def triggerer(name: str) -> None:
        use_kafka_runtime(KafkaRuntime({name: {"bootstrap.servers": f"{name}:9092"}},
                                       recorders[name]))
        if name == "a":
            await started.wait()  # b sets its own meanwhile
        else:
            started.set()

        async def group() -> KafkaRuntime:
            return kafka_runtime()

        seen[name] = [kafka_runtime(), await asyncio.create_task(group()),
                      await asyncio.to_thread(kafka_runtime)]

    await asyncio.gather(triggerer("a"), triggerer("b"))
    for name in ("a", "b"):
        assert {tuple(r.connections) for r in seen[name]} == {(name,)}
        assert all(r.recorder is recorders[name] for r in seen[name])
    assert list(kafka_runtime().connections) == ["process"]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_each_triggerer_task_resolves_and_reports_its_own_registries() -> None:
    """Both name registry id 'sr', two registries: the first's is out (a lookup of its
    client fails, a loopback port nothing listens on), which neither the second's
    readiness and metrics nor the process's show, and each has its own client."""
    found = {}

    async def triggerer(name: str) -> None:
        registries = use_schema_registries({"sr": {"url": f"http://127.0.0.1:{closed_port()}"}})
        client = await asyncio.to_thread(registry_client, "sr")
        if name == "a":
            with pytest.raises(SchemaRegistryUnavailable):
                await asyncio.to_thread(client.get_schema, 1)
        found[name] = (registries, client)

    await asyncio.gather(triggerer("a"), triggerer("b"))
    (a, client_a), (b, client_b) = found["a"], found["b"]
    assert a.clients == {"sr": client_a} and b.clients == {"sr": client_b}
    assert client_a is not client_b
    [problem] = registry_problems(a)
    assert problem.startswith("schema registry 'sr': ") and "looking up schema id 1" in problem
    assert registry_problems(b) == [] and registry_problems() == []
    assert registry_figures(a) == [RegistryFigures("sr", True, {"unreachable": 1})]
    assert registry_figures(b) == [RegistryFigures("sr", False, {})]
    assert registry_figures() == []
