"""``sharedstream status`` at 10,000 watchers (issue 42): a summary, not 10,000 names.

The real command as a process, on the ``scale`` database (conftest.py): 10,000 watchers
in ``scale.orders`` (every hundredth not subscribed, 1,000 of them holding a message)
and ten of the same names in ``scale.refunds``, one live triggerer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from triggerer import run_cli

pytestmark = pytest.mark.integration


def status(scale: Any, tmp_path: Path, *args: str) -> str:
    scale.heartbeat.beat()  # alive: a row unseen for 30 s is stale
    done = run_cli(["status", "--database-url", scale.url, *args], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_status_summarises_the_watchers(scale: Any, tmp_path: Path) -> None:
    out = status(scale, tmp_path)
    lines = out.splitlines()
    assert lines[0] == "triggerers: 1 alive, 0 stale"
    assert lines[1] == ("watchers: 10,010 in 2 group(s): 9,910 subscribed, 100 not "
                        "subscribed, 1,000 holding messages")
    assert lines[2].startswith("  10,000 names: watcher-00000, watcher-00001, "
                               "watcher-00002, watcher-00003, watcher-00004 and 9,995 more "
                               "(`sharedstream status --all-watchers` lists them all")
    assert lines[3].startswith("  not subscribed: 100 names: watcher-00099, watcher-00199,")
    assert lines[-1] == "held messages: 1,000"
    assert len(lines) == 5 and "watcher-09999" not in out


def test_status_watchers_lists_every_watcher(scale: Any, tmp_path: Path) -> None:
    lines = status(scale, tmp_path, "--all-watchers").splitlines()
    listed = [line.split("\t") for line in lines if "\t" in line]
    assert len(listed) == 10_010
    assert listed[0] == ["watcher-00000", "scale.orders", "subscribed", "held 1"]
    assert listed[1] == ["watcher-00000", "scale.refunds", "subscribed", "held 0"]
    assert ["watcher-09999", "scale.orders", "not_subscribed", "held 0"] in listed


def test_status_json_is_the_summary(scale: Any, tmp_path: Path) -> None:
    found = json.loads(status(scale, tmp_path, "--json"))
    assert found["watchers"]["total"] == 10_010 and found["watchers"]["names"] == 10_000
    assert found["watchers"]["by_state"] == {"subscribed": 9_910, "not_subscribed": 100}
    assert found["watchers"]["first"] == [f"watcher-0000{i}" for i in range(5)]
    assert found["held_messages"] == 1_000 and "watcher_list" not in found
    every = json.loads(status(scale, tmp_path, "--json", "--all-watchers"))
    assert len(every["watcher_list"]) == 10_010
