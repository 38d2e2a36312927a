"""The Helm chart's configuration is the one sharedstream reads (issue 31).

Each values file of deploy/helm/sharedstream/ci is rendered by the real helm (built from
its Go module: tests/helm_render.py). Every ``SHAREDSTREAM_*`` variable of every container must be
spelled as the configuration reference (docs/configuration.md, generated from the
settings classes) spells it, and the rendered sharedstream.toml with that environment
must load through the triggerer's own config loader: a renamed or removed option, or
a connection key the loader would read differently, fails here, not in a cluster.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from helm_render import CHART, ROOT, config_map, containers, helm, render
from sharedstream.kafka.connections import resolve_connection
from sharedstream.triggerer.config import load_config

VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
# The placeholders of the reference's variable names, as a name part of a real one.
_PLACEHOLDER = re.compile(r"<[A-Z]+>")


@cache
def _reference_names() -> list[re.Pattern[str]]:
    """Every variable the configuration reference names, placeholders as wildcards."""
    text = (ROOT / "docs/configuration.md").read_text(encoding="utf-8")
    # The general forms (SHAREDSTREAM__<SECTION>__<KEY>, ...__<ID>__<KEY>) would match any
    # option: only a connection's key is open (any librdkafka setting), the rest are listed.
    names = {name for name in re.findall(r"SHAREDSTREAM_[A-Z0-9_<>]*[A-Z0-9>]", text)
             if not name.endswith("__<KEY>") or name.startswith("SHAREDSTREAM_CONN_")}
    return [re.compile("".join(r"[A-Z0-9_.-]+" if _PLACEHOLDER.fullmatch(part)
                               else re.escape(part)
                               for part in re.split(r"(<[A-Z]+>)", name)) + "$")
            for name in names]


@pytest.mark.parametrize("values", VALUES, ids=lambda path: path.name)
def test_every_variable_is_an_option_of_the_reference_and_loads(values: Path,
                                                                tmp_path: Path) -> None:
    docs = render(values)
    toml = config_map(docs, "-config")["sharedstream.toml"]
    config_file = tmp_path / "sharedstream.toml"
    config_file.write_text(toml, encoding="utf-8")
    for container in containers(docs):
        env: dict[str, str] = {}
        for variable in container["env"]:
            name = variable["name"]
            if name == "SHAREDSTREAM_CONFIG" or not name.startswith("SHAREDSTREAM_"):
                continue
            assert any(p.match(name) for p in _reference_names()), (
                f"{values.name}: {container['name']} sets {name}, which "
                "docs/configuration.md does not name")
            # A stand-in for what a Secret or the downward API gives the pod.
            env[name] = variable.get("value", _stand_in(name))
        config = load_config(config_file, env)
        for connection_id in config.connections:
            resolve_connection(connection_id, config.connections, env)
        _check_secret_keys(values, config.connections, env)


def _stand_in(name: str) -> str:
    if name.endswith("__HEALTH_HOST"):
        return "10.1.2.3"
    if name.endswith("__INSTANCE_NAME"):
        return "release-sharedstream-triggerer-7d9f8c-x2vkq"
    if name.endswith("__DATABASE__URL"):
        return "postgresql+psycopg://sharedstream:pw@postgres/sharedstream"
    return "a-secret-from-kubernetes-0123456789"


def _check_secret_keys(values: Path, connections: Mapping[str, Mapping[str, Any]],
                       env: dict[str, str]) -> None:
    """Each Kafka key of ``secrets.connections`` reaches the loader under its own name."""
    chosen = yaml.safe_load(values.read_text(encoding="utf-8")) or {}
    for connection_id, keys in chosen.get("secrets", {}).get("connections", {}).items():
        resolved = resolve_connection(connection_id, connections, env)
        for key in keys:
            assert key in resolved, f"{values.name}: secrets.connections.{connection_id}.{key}"


def test_the_pods_outlast_the_shutdown_bound_and_write_only_their_volumes() -> None:
    docs = render(CHART / "ci/scaled-values.yaml")  # shutdown_timeout = 50
    [deployment] = [doc for doc in docs if doc["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 3
    assert pod["terminationGracePeriodSeconds"] == 50 + 15
    [container] = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    mounts = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
    assert mounts == {"/tmp", "/var/lib/sharedstream"}
    assert container["workingDir"] == "/var/lib/sharedstream"
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    kinds = {doc["kind"] for doc in docs}
    assert {"PodDisruptionBudget", "ServiceMonitor", "ConfigMap"} <= kinds
    # files/ links the repository's dashboard and rules: the ConfigMaps carry those very files.
    data = {key: value for doc in docs if doc["kind"] == "ConfigMap"
            for key, value in doc["data"].items()}
    assert data["sharedstream.json"].strip() == (
        ROOT / "deploy/grafana/sharedstream.json").read_text(encoding="utf-8").strip()
    assert data["sharedstream-alerts.yml"].strip() == (
        ROOT / "deploy/prometheus/sharedstream-alerts.yml").read_text(encoding="utf-8").strip()


def test_a_separate_deliverer_takes_delivery_off_the_triggerer() -> None:
    by_name = {c["name"]: c for c in containers(render(CHART / "ci/deliverer-values.yaml"))}
    assert "--no-delivery" in by_name["triggerer"]["args"]
    assert by_name["deliverer"]["args"][0] == "deliver"


def test_a_console_without_a_token_is_refused_with_one_error_line(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("console: {enabled: true}\nconfig: {database: {url: 'postgresql://db/s'}}\n",
                      encoding="utf-8")
    rendered = subprocess.run([helm(), "template", "sharedstream", str(CHART), "-f",
                               str(values)], capture_output=True, text=True, timeout=60,
                              check=False)
    assert rendered.returncode != 0
    assert "error: console.enabled: the console listens beyond loopback and needs a token" \
        in rendered.stderr
