"""The Helm chart's values reference (docs/helm.md), from deploy/helm/sharedstream/values.yaml.

Each key's meaning is the ``#`` comment block right above it in values.yaml; its
default is the parsed value. A key with keys of its own under it is a heading row
(its children follow); a key without a comment fails the build, so the page never
lists a key with no explanation. ``##`` lines are the file's own notes, not entries.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

VALUES = Path(__file__).resolve().parents[2] / "deploy/helm/sharedstream/values.yaml"
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.\-]+):(?: |$)")


def entries(text: str) -> list[tuple[str, str]]:
    """(dotted path, comment) of every key, in file order."""
    found: list[tuple[str, str]] = []
    stack: list[tuple[int, str]] = []
    comment: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("##") or not stripped:
            comment = [] if not stripped else comment
            continue
        if stripped.startswith("#"):
            comment.append(stripped.lstrip("#").strip())
            continue
        match = _KEY.match(line)
        if match is None:  # a list item or a block scalar's text
            comment = []
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        path = ".".join(key for _, key in stack)
        if not comment and not _under_documented_leaf(path, found):
            raise ValueError(f"{VALUES.name}: {path} has no comment above it")
        if comment:
            found.append((path, " ".join(comment)))
        comment = []
    return found


def _under_documented_leaf(path: str, found: list[tuple[str, str]]) -> bool:
    """A key inside a documented key's default (``resources.requests``) needs no comment."""
    return any(path.startswith(parent + ".") for parent, _ in found)


def _lookup(values: dict[str, Any], path: str) -> Any:
    node: Any = values
    for key in path.split("."):
        node = node[key]
    return node


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render_values() -> str:
    text = VALUES.read_text(encoding="utf-8")
    values = yaml.safe_load(text)
    rows = ["| key | default | meaning |", "|---|---|---|"]
    documented = entries(text)
    paths = [path for path, _ in documented]
    for path, comment in documented:
        default = _lookup(values, path)
        has_children = any(other.startswith(path + ".") for other in paths)
        shown = "" if has_children else f"`{_cell(json.dumps(default))}`"
        rows.append(f"| `{path}` | {shown} | {_cell(comment)} |")
    return "\n".join(rows)
