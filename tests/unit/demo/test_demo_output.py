"""``sharedstream demo`` piped, as a first-time user pipes it (issue 29): the summary's
lines never wrap, so its "look closer" command pastes as printed and runs, and the
demo's temporary directory is gone after exit unless ``--keep`` keeps it for that look.
A subprocess on librdkafka's mock cluster, so no services (as in test_demo.py)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(90)


def demo(tmp: Path, *args: str) -> str:
    # A long TMPDIR makes the database URL longer than 80 columns.
    done = subprocess.run(
        [sys.executable, "-c", "from sharedstream.cli import main; main()",
         "demo", "--seconds", "3", "--outage", "0", *args],
        capture_output=True, text=True, timeout=80, check=False,
        env={**os.environ, "TMPDIR": str(tmp), "COLUMNS": "80"}, cwd=tmp)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_demo_removes_its_directory_at_exit(tmp_path: Path) -> None:
    tmp = tmp_path / ("a-long-temporary-directory-name-" * 2)
    tmp.mkdir()
    out = demo(tmp)
    assert list(tmp.iterdir()) == [], out
    assert "--keep" in out


def test_kept_the_look_closer_command_pastes_as_printed(tmp_path: Path) -> None:
    tmp = tmp_path / ("a-long-temporary-directory-name-" * 2)
    tmp.mkdir()
    out = demo(tmp, "--keep")
    [line] = [line for line in out.splitlines() if "sharedstream events list" in line]
    command = shlex.split(line[line.index("sharedstream events list"):].rstrip(" │"))
    assert command[-2] == "--database-url" and Path(
        command[-1].removeprefix("sqlite:///")).is_file(), line
    looked = subprocess.run(
        [sys.executable, "-c", "from sharedstream.cli import main; main()", *command[1:],
         "--json"], capture_output=True, text=True, timeout=30, check=False, cwd=tmp)
    assert looked.returncode == 0, looked.stderr
    assert '"asset": "paid_orders"' in looked.stdout
