"""The rooms of ``src/sharedstream`` import one way: downwards, never in a cycle.

Every import counts, including those inside functions and under TYPE_CHECKING: a
lazy import still ties two rooms together. The order is the one in
docs/architecture.md; a room may import only rooms ranked below it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "sharedstream"

# Rank of each room (a package, or a top-level module); a room imports only lower ranks.
RANKS: dict[str, float] = {
    "core": 0,
    "statestore": 1,
    "kafka": 1,
    "serde": 1.5,  # value deserialisers: over core's message, reusing kafka's secret masking
    "triggers": 2,
    "__init__": 2.5,  # ``from sharedstream import Asset``: the public names, from triggers
    "airflowbridge": 3,
    "delivery": 3.5,  # uses the bridge's Airflow client
    "triggerer": 4,
    "ops": 5,
    "web": 5.5,  # the console: over ops' offsets and dead-letter reading
    "dlq": 6,  # the public module over ops' dead-letter reader
    "demo": 7,
    "cli": 8,
}


def room_of(path: Path) -> str:
    parts = path.relative_to(SRC).parts
    return parts[0] if len(parts) > 1 else path.stem


def imported_rooms(path: Path) -> list[tuple[int, str]]:
    """(line, room) of every ``sharedstream.<room>`` import in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "sharedstream":
                names = [f"sharedstream.{alias.name if alias.name in RANKS else '__init__'}"
                         for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "sharedstream" and len(parts) > 1:
                found.append((node.lineno, parts[1]))
    return found


def upward_imports() -> list[str]:
    problems = []
    for path in sorted(SRC.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        room = room_of(path)
        assert room in RANKS, f"{path}: room {room!r} has no rank in tests/unit/test_rooms.py"
        for line, target in imported_rooms(path):
            if target == room:
                continue
            if target not in RANKS:
                problems.append(f"{path.relative_to(SRC)}:{line} imports unknown room {target}")
            elif RANKS[target] >= RANKS[room]:
                problems.append(f"{path.relative_to(SRC)}:{line}: {room} (rank {RANKS[room]}) "
                                f"imports {target} (rank {RANKS[target]})")
    return problems


def test_rooms_import_only_rooms_below_them() -> None:
    assert upward_imports() == []


def test_every_package_is_a_ranked_room() -> None:
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    assert packages <= set(RANKS)


@pytest.mark.parametrize("source, room, target", [
    ("from sharedstream.triggerer.config import load_config\n", "core", "triggerer"),
    ("def f():\n    import sharedstream.ops.clitools\n", "kafka", "ops"),
    ("from sharedstream import kafka\n", "statestore", "kafka"),
    ("from sharedstream import Asset\n", "triggers", "__init__"),
])
def test_the_check_sees_lazy_and_package_imports(tmp_path: Path, source: str, room: str,
                                                  target: str) -> None:
    module = tmp_path / "m.py"
    module.write_text(source)
    assert {t for _, t in imported_rooms(module)} == {target}
    assert RANKS[target] >= RANKS[room]
