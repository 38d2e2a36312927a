"""Kubernetes JSON schemas for kubeconform, made offline from the API's own OpenAPI spec.

    python3 scripts/kube_schemas.py SWAGGER_JSON OUT_DIR [EXTRA_SCHEMA_DIR]

SWAGGER_JSON is ``api/openapi-spec/swagger.json`` of the ``k8s.io/kubernetes`` Go module
(scripts/helmcheck downloads it through the module proxy: kubeconform's default schemas
come from a web host this machine cannot reach). For every kind the spec names
(``x-kubernetes-group-version-kind``) one standalone, strict schema is written as
``<kind><suffix>.json``, the layout kubeconform's ``{{ .ResourceKind }}{{ .KindSuffix }}``
template reads (``deployment-apps-v1.json``, ``configmap-v1.json``):

- standalone: the definitions the kind reaches are copied under ``definitions`` and the
  ``$ref`` s point there, so no file refers to another;
- strict: an object with ``properties`` and no ``additionalProperties`` refuses unknown
  fields, so a misspelt field in a template fails instead of being dropped by the API
  server;
- ``IntOrString`` and ``Quantity``, strings in the spec, accept numbers too, as the API
  server does (``port: 8080``, ``cpu: 1``).

Files of EXTRA_SCHEMA_DIR (schemas of custom resources, such as the ServiceMonitor's)
are copied beside them.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_REF = "#/definitions/"
_STRING_OR_NUMBER = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {
        "oneOf": [{"type": "string"}, {"type": "integer"}]},
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {
        "oneOf": [{"type": "string"}, {"type": "number"}]},
}


def _refs(node: Any) -> Iterator[str]:
    """Every definition name ``node`` refers to, at any depth."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF):
            yield ref[len(_REF):]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _strict(node: Any) -> Any:
    """``node`` with ``additionalProperties: false`` on every object that lists properties."""
    if isinstance(node, dict):
        out = {key: _strict(value) for key, value in node.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strict(value) for value in node]
    return node


def _closure(name: str, definitions: dict[str, Any]) -> dict[str, Any]:
    """The definitions ``name`` reaches, itself included."""
    seen: dict[str, Any] = {}
    todo = [name]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen[current] = definitions[current]
        todo.extend(ref for ref in _refs(definitions[current]) if ref not in seen)
    return seen


def file_name(group: str, version: str, kind: str) -> str:
    """kubeconform's name: the kind, then the group's first label (if any) and the version."""
    suffix = f"-{group.split('.')[0]}-{version}" if group else f"-{version}"
    return f"{kind}{suffix}".lower() + ".json"


def write_schemas(swagger: dict[str, Any], out: Path) -> int:
    definitions: dict[str, Any] = dict(swagger["definitions"])
    definitions.update(_STRING_OR_NUMBER)
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for name, definition in definitions.items():
        for gvk in definition.get("x-kubernetes-group-version-kind", []):
            reached = _closure(name, definitions)
            schema = {"$schema": "http://json-schema.org/draft-07/schema#",
                      **_strict(definition),
                      "definitions": {key: _strict(value) for key, value in reached.items()}}
            target = out / file_name(gvk["group"], gvk["version"], gvk["kind"])
            target.write_text(json.dumps(schema), encoding="utf-8")
            written += 1
    return written


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: kube_schemas.py SWAGGER_JSON OUT_DIR [EXTRA_SCHEMA_DIR]", file=sys.stderr)
        return 2
    swagger = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    out = Path(argv[1])
    count = write_schemas(swagger, out)
    if len(argv) == 3:
        for extra in sorted(Path(argv[2]).glob("*.json")):
            shutil.copyfile(extra, out / extra.name)
            count += 1
    print(f"kube_schemas.py: {count} schemas in {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
