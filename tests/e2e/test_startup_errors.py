"""Start-up mistakes that used to get past ``check`` (issue 25, items 5, 6, 16-19).

Each is driven through the real command line, as an operator meets it: ``check`` and
``run`` refuse with exit 2 and one ``error:`` line naming the watcher, module, option or
variable and the fix, before anything is written. Every refusal has a positive twin
where one exists (the same shape, done right, passes), so a refusal cannot pass by
refusing everything. Watcher modules are written into the test's directory: a module
that exits at import, or a filter of the wrong shape, must never sit where the linters
or another test would import it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # where the type stubs declare it
from test_startup import OFFLINE, refused, start
from triggerer import COMMAND, Triggerer, run_cli, until, write_config

IMPORTS = ("from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger, "
           "KafkaMessageTrigger, TriggerEvent, reject_shared_stream_event\n")


def module(tmp_path: Path, text: str, name: str = "watchers.py") -> Path:
    path = tmp_path / name
    path.write_text(IMPORTS + text)
    return path


def watcher(asset: str, topics: list[str], dlq: str | None = None,
            cls: str = "KafkaSharedStreamTrigger") -> str:
    return (f"{asset} = Asset({asset!r}, watchers=[AssetWatcher({asset + '_watcher'!r}, "
            f"{cls}(topics={topics!r}, kafka_config_id='e2e', dlq_topic={dlq!r}))])\n")


def check_and_run(tmp_path: Path, watchers: Path, *needles: str, **kwargs: Any) -> None:
    """Both commands refuse, naming ``needles``, and neither wrote the database."""
    refused(run_cli(["check", str(watchers), "--config",
                     str(start_config(tmp_path, **kwargs))], cwd=tmp_path), *needles)
    refused(start(tmp_path, watchers, **kwargs), *needles)
    assert not (tmp_path / "state.db").exists()


def start_config(tmp_path: Path, **kwargs: Any) -> Path:
    """The config :func:`test_startup.start` writes, for ``check``."""
    return write_config(tmp_path / "check.toml",
                        database_url=f"sqlite:///{tmp_path / 'state.db'}",
                        connection=kwargs.get("connection", OFFLINE),
                        triggerer=kwargs.get("triggerer"))


def check_passes(tmp_path: Path, watchers: Path, connection: dict[str, Any],
                 triggerer: dict[str, Any] | None = None, env: dict[str, str] | None = None
                 ) -> str:
    config = write_config(tmp_path / "ok.toml", database_url=f"sqlite:///{tmp_path / 'ok.db'}",
                          connection=connection, triggerer=triggerer)
    result = run_cli(["check", str(watchers), "--config", str(config)], cwd=tmp_path, env=env)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "ok: topics: all present" in result.stdout, result.stdout
    return result.stdout


# -- item 5: a dead-letter topic the process also reads ----------------------------------

def test_a_dead_letter_topic_its_own_group_watches_is_refused(tmp_path: Path) -> None:
    """It used to pass ``check``; ``run`` then rejoined every few seconds with "Duplicate
    topics not allowed", read nothing, and never said dlq_topic."""
    looping = module(tmp_path, watcher("looping", ["orders", "refunds"], dlq="refunds"))
    check_and_run(tmp_path, looping, "'looping_watcher'", "dlq_topic 'refunds'",
                  "no watcher of this process reads")


def test_dead_letters_that_come_back_through_another_group_are_refused(tmp_path: Path) -> None:
    """Group a's dead letters are group b's input and b's are a's: a rejected message
    would go round for ever. Both watchers and both topics are named."""
    loop = module(tmp_path, watcher("a", ["orders"], dlq="returns")
                  + watcher("b", ["returns"], dlq="orders"))
    check_and_run(tmp_path, loop, "'a_watcher'", "'b_watcher'", "'returns'", "'orders'",
                  "dlq_topic")


def test_a_watcher_may_read_another_groups_dead_letters(
        tmp_path: Path, connection: dict[str, Any], create_topic: Callable[..., str]) -> None:
    """Reading dead letters (to alert, to archive) is not a loop: the reader's own
    rejects go elsewhere (here, to the database), so nothing comes back."""
    orders, dlq = create_topic("orders"), create_topic("orders-dlq")
    watchers = module(tmp_path, watcher("orders", [orders], dlq=dlq)
                      + watcher("alerts", [dlq]))
    out = check_passes(tmp_path, watchers, connection)
    assert "orders_watcher" in out and "alerts_watcher" in out, out


# -- item 6: a filter that is not an async generator -------------------------------------

FILTERS = {
    # Only rejects, never yields: an ``async def`` without ``yield`` is a coroutine.
    "coroutine": ("    async def filter_shared_stream(self, stream):\n"
                  "        async for message in stream:\n"
                  "            reject_shared_stream_event('never wanted')\n",
                  "a coroutine function"),
    "generator": ("    def filter_shared_stream(self, stream):\n"
                  "        yield TriggerEvent('x')\n", "a plain generator function"),
    "function": ("    def filter_shared_stream(self, stream):\n"
                 "        return []\n", "a plain function"),
}


@pytest.mark.parametrize("shape", sorted(FILTERS))
def test_a_filter_that_is_not_an_async_generator_is_refused(tmp_path: Path, shape: str) -> None:
    """It used to pass ``check``; ``run`` then restarted the filter for ever with a
    traceback each time, and the commit stayed at 0."""
    body, what = FILTERS[shape]
    watchers = module(tmp_path, f"class Odd(KafkaSharedStreamTrigger):\n{body}\n"
                      + watcher("odd", ["orders"], cls="Odd"))
    check_and_run(tmp_path, watchers, "'odd_watcher'", "Odd.filter_shared_stream", what,
                  "async def", "yield")


def test_async_generator_filters_pass_including_the_shipped_triggers(
        tmp_path: Path, connection: dict[str, Any], create_topic: Callable[..., str]) -> None:
    """The positive twin: a filter that only rejects but has a ``yield``, the stock
    trigger, ``KafkaMessageTrigger`` and the Airflow bridge's sink trigger."""
    topic = create_topic("orders")
    (tmp_path / "helpers.py").write_text("def keep(message):\n    return message.value()\n")
    watchers = module(tmp_path, (
        "class Rejecter(KafkaSharedStreamTrigger):\n"
        "    async def filter_shared_stream(self, stream):\n"
        "        async for message in stream:\n"
        "            reject_shared_stream_event('never wanted')\n"
        "        return\n"
        "        yield\n\n"
        "from sharedstream.airflowbridge.sink import AirflowAssetSinkTrigger\n"
        f"kinds = [Asset(name, watchers=[AssetWatcher(name, trigger)]) for name, trigger in [\n"
        f"    ('rejecter', Rejecter(topics=[{topic!r}], kafka_config_id='e2e')),\n"
        f"    ('stock', KafkaSharedStreamTrigger(topics=[{topic!r}], kafka_config_id='e2e')),\n"
        f"    ('function', KafkaMessageTrigger(topics=[{topic!r}], kafka_config_id='e2e',\n"
        "                                     apply_function='helpers.keep')),\n"
        f"    ('sink', AirflowAssetSinkTrigger(topics=[{topic!r}], kafka_config_id='e2e',\n"
        "                                     targets=['b']))]]\n"))
    out = check_passes(tmp_path, watchers, connection)
    assert ": function, rejecter, sink, stock" in out, out


# -- item 16: the health port -------------------------------------------------------------

def test_a_health_port_in_use_is_one_error_line_before_anything_is_written(
        tmp_path: Path, connection: dict[str, Any], create_topic: Callable[..., str]) -> None:
    """``run`` used to print a 57-line traceback and exit 1. ``check`` says what listens
    there but passes (issue 43: it binds nothing; see the test below)."""
    topic = create_topic("orders")
    watchers = module(tmp_path, watcher("orders", [topic]))
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        refused(start(tmp_path, watchers, connection=connection,
                      triggerer={"health_port": port}), f"127.0.0.1:{port}", "in use",
                "health_port")
        assert not (tmp_path / "state.db").exists()
        out = check_passes(tmp_path, watchers, connection, triggerer={"health_port": port})
        assert f"ok: health server: 127.0.0.1:{port} is in use now" in out, out
    # The port released: check says nothing listens there.
    out = check_passes(tmp_path, watchers, connection, triggerer={"health_port": port})
    assert f"ok: health server: 127.0.0.1:{port}, nothing listens there now" in out, out


def test_check_beside_a_running_triggerer_binds_nothing(
        tmp_path: Path, connection: dict[str, Any], create_topic: Callable[..., str],
        triggerers: Callable[..., Triggerer]) -> None:
    """Issue 43: ``check`` run beside a running triggerer, with the same config, exited 2
    (``health server: 127.0.0.1:PORT is in use``): it bound the port the triggerer serves
    on. It must check, not bind: exit 0, and the triggerer keeps serving."""
    topic = create_topic("orders")
    watchers = module(tmp_path, watcher("orders", [topic]))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = write_config(tmp_path / "same.toml",
                          database_url=f"sqlite:///{tmp_path / 'same.db'}",
                          connection=connection, triggerer={"health_port": port})
    running = triggerers(config, watchers=watchers).start()
    running.wait_ready()
    assert running.port == port
    result = run_cli(["check", str(watchers), "--config", str(config)], cwd=tmp_path)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert f"ok: health server: 127.0.0.1:{port} is in use now" in result.stdout, result.stdout
    assert running.get("/livez")[0] == 200


# -- item 17: a watcher module that exits at import ---------------------------------------

EXITS = {
    "sys.exit(3)": ("import sys\nsys.exit(3)\n", "sys.exit(3)"),
    "SystemExit with a message": ("raise SystemExit('not here')\n", "sys.exit('not here')"),
    "KeyboardInterrupt": ("raise KeyboardInterrupt\n", "KeyboardInterrupt"),
    "a BaseException": ("class Odd(BaseException):\n    pass\n\nraise Odd('odd')\n",
                        "Odd: odd"),
}


@pytest.mark.parametrize("case", sorted(EXITS))
def test_a_watcher_module_that_exits_at_import_is_one_error_line(
        tmp_path: Path, case: str) -> None:
    """``check`` and ``run`` used to exit 3 and print nothing."""
    body, what = EXITS[case]
    quitter = tmp_path / "quitter.py"
    quitter.write_text(body)
    line = refused(run_cli(["check", str(quitter), "--config", str(start_config(tmp_path))],
                           cwd=tmp_path), str(quitter), what)
    assert f"{quitter}:" in line, line  # the line of the module that did it
    refused(start(tmp_path, quitter), str(quitter), what)


def test_sigterm_during_a_watcher_import_is_still_a_clean_exit(tmp_path: Path) -> None:
    """The SIGTERM of a process still starting raises SystemExit(0) wherever the main
    thread is, in a watcher module's import too: that one is the operator's stop, not the
    module's doing. The module blocks opening a FIFO, so the signal lands inside the
    import (opening the FIFO for writing returns only once the module opened it)."""
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    slow = tmp_path / "slow.py"
    slow.write_text(f"open({str(fifo)!r}).read()\n")
    config = start_config(tmp_path)
    process = subprocess.Popen([*COMMAND, "check", str(slow), "--config", str(config)],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    with fifo.open("w"):
        process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, (process.returncode, out, err)
    assert "error:" not in err and "Traceback" not in err, err


# -- item 18: environment overrides name the variable ------------------------------------

def test_an_unknown_section_in_an_environment_variable_names_the_variable(
        tmp_path: Path) -> None:
    """It used to be reported as an unknown section of the config *file*."""
    watchers = module(tmp_path, watcher("orders", ["orders"]))
    line = refused(start(tmp_path, watchers, env={"SHAREDSTREAM__TRIGERER__ACK_TIMEOUT": "5"}),
                   "environment variable SHAREDSTREAM__TRIGERER__ACK_TIMEOUT",
                   "unknown section", "did you mean SHAREDSTREAM__TRIGGERER__ACK_TIMEOUT?")
    assert "sharedstream.toml" not in line, line
    refused(start(tmp_path, watchers, env={"SHAREDSTREAM__TRIGGERER__ACK_TIMOUT": "5"}),
            "environment variable SHAREDSTREAM__TRIGGERER__ACK_TIMOUT", "unknown option",
            "did you mean SHAREDSTREAM__TRIGGERER__ACK_TIMEOUT?")
    refused(start(tmp_path, watchers, env={"SHAREDSTREAM__STATE_STORE__RETENTION_DAYS": "5"}),
            "environment variable SHAREDSTREAM__STATE_STORE__RETENTION_DAYS", "unknown option",
            "did you mean SHAREDSTREAM__STATE_STORE__DEFAULT_RETENTION_DAYS?")


def test_an_unknown_section_or_option_in_the_file_suggests_the_closest(tmp_path: Path) -> None:
    watchers = module(tmp_path, watcher("orders", ["orders"]))
    config = start_config(tmp_path)
    for mistake, needles in (("[trigerer]\nack_timeout = 5\n",
                              ("[trigerer] in", "unknown section", "did you mean [triggerer]?")),
                             ("[state_store]\nretention_days = 5\n",
                              ("[state_store] retention_days in", "unknown option",
                               "did you mean default_retention_days?"))):
        config.write_text(start_config(tmp_path).read_text() + mistake)
        refused(run_cli(["check", str(watchers), "--config", str(config)], cwd=tmp_path),
                str(config), *needles)


# -- item 19: a topic missing from the first metadata answer -----------------------------

def test_check_asks_again_for_a_topic_missing_from_the_first_answer(
        tmp_path: Path, connection: dict[str, Any], kafka_admin: AdminClient) -> None:
    """As after a cluster restart, when the triggerer is up before every topic is back in
    the metadata: the topic appears only once ``check`` has seen it missing (its log line
    says so), and ``check`` must then pass instead of calling it missing."""
    topic = f"orders-late-{uuid.uuid4().hex[:8]}"
    watchers = module(tmp_path, watcher("orders", [topic]))
    config = start_config(tmp_path, connection=connection, triggerer={"broker_timeout": 120.0})
    log = tmp_path / "check.log"
    with log.open("wb") as sink:
        process = subprocess.Popen([*COMMAND, "check", str(watchers), "--config", str(config)],
                                   cwd=tmp_path, stdout=sink, stderr=subprocess.STDOUT)
    try:
        def waiting() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"check ended ({process.returncode}) instead of "
                                     f"asking again:\n{log.read_text()}")
            return f"topics not in the metadata of connection 'e2e' yet: {topic}" in log.read_text()

        until(waiting, "check saying it asks again for the missing topic")
        kafka_admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
        assert process.wait(timeout=120) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        kafka_admin.delete_topics([topic], operation_timeout=10)
    assert "ok: topics: all present" in log.read_text()


def test_a_topic_still_missing_at_broker_timeout_is_an_error(
        tmp_path: Path, connection: dict[str, Any]) -> None:
    watchers = module(tmp_path, watcher("orders", ["e2e-no-such-topic"]))
    result = start(tmp_path, watchers, connection=connection, triggerer={"broker_timeout": 2.0})
    refused(result, "missing topics: e2e-no-such-topic", "broker_timeout", "create them")
    # Asked again before giving up: the first answer alone was not the verdict.
    assert "topics not in the metadata of connection 'e2e' yet: e2e-no-such-topic" in result.stderr
    assert not (tmp_path / "state.db").exists()
