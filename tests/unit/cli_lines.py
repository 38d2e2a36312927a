"""What the unit tests of bad input share: the real command line in a fresh interpreter,
and a one-watcher module to point it at. Nothing here needs a service: every case
fails before anything connects."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def watcher_module(tmp_path: Path, deserializer: str, imports: str) -> Path:
    """``watchers.py``: one watcher on topic ``t`` reading values with ``deserializer``
    (line 4 of the file), after ``from sharedstream.serde import <imports>``."""
    path = tmp_path / "watchers.py"
    path.write_text(
        "from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger\n"
        f"from sharedstream.serde import {imports}\n"
        "a = Asset('a', watchers=[AssetWatcher('w', KafkaSharedStreamTrigger(\n"
        f"    topics=['t'], value_deserializer={deserializer}))])\n")
    return path


def error_line(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
               code: int = 2) -> str:
    """Run ``sharedstream ARGS`` in ``tmp_path``; it must exit ``code`` with one
    ``error:`` line and no traceback, which is returned."""
    result = subprocess.run(
        [sys.executable, "-c", "from sharedstream.cli import main; main()", *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin", **(env or {})})
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]
