"""The rooms of ``src/sharedstream`` import one way: downwards, never in a cycle; and
no two files import each other, however indirectly.

Every import counts, including those inside functions and under TYPE_CHECKING: a
lazy import still ties two rooms (or two files) together. The order is the one in
docs/architecture.md; a room may import only rooms ranked below it. Within a room,
files form no import circle either: a circle between files is two classes that
cannot be understood (or tested) one without the other; a callback or a Protocol
breaks it, as ``core/ledger.py`` and ``core/stream.py`` do.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "sharedstream"
BENCH = SRC.parents[1] / "bench"

# Rank of each room (a package, or a top-level module); a room imports only lower ranks.
RANKS: dict[str, float] = {
    "tracing": -1,  # spans: below the core, which reports each outcome to it (issue 44)
    "core": 0,
    "statestore": 1,
    "kafka": 1,
    "serde": 1.5,  # value deserialisers: over core's message, reusing kafka's secret masking
    "uow": 1.75,  # the unit of work: events, state and holds of a batch in one transaction
    "triggers": 2,
    "__init__": 2.5,  # ``from sharedstream import Asset``: the public names, from triggers
    "airflowbridge": 3,
    "delivery": 3.5,  # uses the bridge's Airflow client
    "triggerer": 4,
    "testing": 4.5,  # the watcher harness (engine, adapter on MemoryBroker, sink); MemoryStream
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


# -- files -------------------------------------------------------------------------------

def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module under package directory ``root``."""
    modules = {}
    for path in root.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def import_graph(root: Path) -> dict[str, dict[str, int]]:
    """module -> {module it imports: line of the first such import}, for every import in
    the file (lazy, TYPE_CHECKING and relative ones included). ``from a.b import c``
    names module ``a.b.c`` when that is a module, else ``a.b``. The parent packages
    Python runs before a module are not counted: they are not the file's choice."""
    modules = module_files(root)

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str | None] = []
            if isinstance(node, ast.Import | ast.ImportFrom):
                line = node.lineno
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else known(base)
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [known(a.name) for a in node.names]
            for target in targets:
                if target is not None and target != module:
                    edges.setdefault(target, line)
        graph[module] = edges
    return graph


def circles(graph: dict[str, dict[str, int]]) -> list[tuple[str, ...]]:
    """The import circles (strongly connected sets of two or more modules), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[str, ...]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in graph.get(module, {}):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            members = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.append(member)
                if member == module:
                    break
            if len(members) > 1:
                found.append(tuple(sorted(members)))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def describe(graph: dict[str, dict[str, int]], circle: tuple[str, ...]) -> str:
    """One shortest loop through the circle's first module, with each import's line."""
    members = set(circle)
    start = circle[0]
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        module = queue.popleft()
        for target in graph[module]:
            if target == start:
                path = [module]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                path.reverse()
                hops = [f"{a} (line {graph[a][b]}) -> {b}"
                        for a, b in zip(path, [*path[1:], start], strict=True)]
                return "; ".join(hops)
            if target in members and target not in came_from and target != start:
                came_from[target] = module
                queue.append(target)
    raise AssertionError(f"{circle} is not a circle")


def test_no_import_circle_between_files() -> None:
    graph = import_graph(SRC)
    assert [f"import circle {' <-> '.join(c)}: {describe(graph, c)}"
            for c in circles(graph)] == []


def test_no_import_circle_in_the_bench() -> None:
    """The bench's runner chooses and its parts measure: no part imports the runner."""
    graph = import_graph(BENCH)
    assert [f"import circle {' <-> '.join(c)}: {describe(graph, c)}"
            for c in circles(graph)] == []


def test_the_file_check_names_lazy_and_type_checking_circles(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..c import C\n")
    (package / "c.py").write_text("def f():\n    import pkg.a\n")
    (package / "d.py").write_text("from pkg import a\n")  # into the circle, not part of it
    graph = import_graph(package)
    assert circles(graph) == [("pkg.a", "pkg.c", "pkg.sub.b")]
    assert describe(graph, ("pkg.a", "pkg.c", "pkg.sub.b")) == (
        "pkg.a (line 1) -> pkg.sub.b; pkg.sub.b (line 3) -> pkg.c; pkg.c (line 2) -> pkg.a")
