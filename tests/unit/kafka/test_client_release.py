"""Kafka clients are destroyed by their owner, never by the cyclic garbage collector.

librdkafka aborts the whole process ("calling rd_kafka_destroy() from librdkafka
owned thread is prohibited") when a client is destroyed on one of its own threads.
An admin request's future completes on such a thread and runs Python there, so
any collection it triggers frees whatever cyclic garbage exists at that moment:
a Kafka client held only by a cycle (a failed command's traceback is one) takes
the process down with it. CI saw this abort the test run after
``offsets show`` timed out against a broker that never answered.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from gc_guard import kafka_clients_in_cyclic_garbage
from sharedstream.cli import cli


@pytest.fixture
def unreachable(tmp_path: Path) -> Iterator[Path]:
    config = tmp_path / "sharedstream.toml"
    config.write_text('[connections.kafka_default]\n"bootstrap.servers" = "127.0.0.1:1"\n')
    yield config


@pytest.mark.parametrize("args", [
    ["offsets", "show", "--group", "g"],
    ["offsets", "reset", "--group", "g", "--to", "earliest", "--yes"],
])
def test_a_command_that_timed_out_leaves_no_client_to_the_collector(
        unreachable: Path, args: list[str]) -> None:
    # CliRunner keeps the failure's traceback: a cycle through the command's frames.
    result = CliRunner().invoke(cli, [*args, "--config", str(unreachable), "--timeout", "0.2"])
    assert result.exit_code == 1, result.output
    del result  # what a caller does next: the command's frames are now garbage
    assert kafka_clients_in_cyclic_garbage() == []
