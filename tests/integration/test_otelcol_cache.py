"""``scripts/otelcol`` leaves no scratch directory in the shared tools cache.

A build writes into ``$cache/.otelcol-build.XXXXXX`` and renames the binary into place;
its own exit removes the scratch directory, but a build that is killed (a timeout, a
Ctrl-C of the test run that was waiting on it) cannot. Every later build runs under the
same lock, so a scratch directory it finds is a dead build's, and it removes it. The
finished binaries (``otelcol-VERSION-HASH``) are the cache and are kept.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from localservices.otelcol import BUILD_SCRIPT


def test_a_killed_builds_scratch_directory_is_removed_by_the_next_build(
        tmp_path: Path) -> None:
    dead = tmp_path / ".otelcol-build.k1lled"
    (dead / "partial").mkdir(parents=True)
    kept = tmp_path / "otelcol-0.0.0-000000000000"  # another tree's finished build
    kept.mkdir()
    (kept / "otelcol").write_text("")
    env = {**os.environ, "SHAREDSTREAM_TOOLS_CACHE": str(tmp_path), "GO": "/bin/false"}
    built = subprocess.run([str(BUILD_SCRIPT)], env=env, capture_output=True, text=True,
                           timeout=60, check=False)
    assert built.returncode == 1, built.stderr  # /bin/false: the build fails at once
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".otelcol.lock", "otelcol-0.0.0-000000000000"], built.stderr
