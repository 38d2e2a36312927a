"""The chart rendered by the real helm, for the tests of deploy/helm/sharedstream.

helm is the one scripts/helmcheck builds from its Go module (``--tools`` builds it when
missing, or waits for a build under way, and prints its path): the tests never skip for
want of it, and CI builds it anyway for the chart's checks.
"""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy/helm/sharedstream"


@cache
def helm() -> str:
    tools = subprocess.run([str(ROOT / "scripts/helmcheck"), "--tools"], capture_output=True,
                           text=True, timeout=1200, check=False)
    assert tools.returncode == 0, f"scripts/helmcheck --tools failed:\n{tools.stderr}"
    found = dict(line.split("=", 1) for line in tools.stdout.split())
    return found["helm"]


def render(*values: Path) -> list[dict[str, Any]]:
    """The chart's objects for these values files (later files win, as with helm -f)."""
    arguments = [arg for path in values for arg in ("-f", str(path))]
    rendered = subprocess.run([helm(), "template", "sharedstream", str(CHART), *arguments],
                              capture_output=True, text=True, timeout=60, check=False)
    assert rendered.returncode == 0, rendered.stderr
    return [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]


def containers(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [container for doc in docs if doc["kind"] == "Deployment"
            for container in doc["spec"]["template"]["spec"]["containers"]]


def config_map(docs: list[dict[str, Any]], suffix: str) -> dict[str, str]:
    """The data of the release's ConfigMap whose name ends in ``suffix``."""
    data: dict[str, str] = next(doc for doc in docs if doc["kind"] == "ConfigMap"
                                and doc["metadata"]["name"].endswith(suffix))["data"]
    return data
