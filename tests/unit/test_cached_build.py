"""The Kafka jars' and the registry's cached builds leave no scratch directory behind.

Each build works in a scratch directory in its cache (``fetch-*``, ``build-*``) and
removes it when it ends; a build that is killed (a timeout, a Ctrl-C of the test run
waiting on it) cannot. Builds run under the cache's lock, so a scratch directory the
next one finds is a dead build's, and it is removed. Here Maven is off the PATH, so the
build fails at once, after that clean-up; the cache root is a temporary directory.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from localservices import ServiceError
from localservices.kafka import kafka_libs
from localservices.registry import registry_runner


@pytest.mark.parametrize(("build", "home", "scratch"), [
    (kafka_libs, "kafka-4.3.0", "fetch-k1lled"),
    (registry_runner, "apicurio-registry-2.0.2.Final", "build-k1lled"),
])
def test_a_killed_builds_scratch_directory_is_removed_by_the_next_build(
        build: Callable[[], Path], home: str, scratch: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHAREDSTREAM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "no-maven-here"))
    (tmp_path / home / scratch / "partial").mkdir(parents=True)
    with pytest.raises(ServiceError, match=r"Maven \(mvn\) is needed"):
        build()
    assert sorted(p.name for p in (tmp_path / home).iterdir()) == [".lock"]
