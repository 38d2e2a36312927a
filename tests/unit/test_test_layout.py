"""What tests this file? The answer is found by name (issue 44, item 7).

Every module of ``src/sharedstream`` has a test file named for it, or a line in
docs/architecture.md's "Which test covers what" table naming the test that covers it and
why it has none of its own. A unit test lives in the folder of its module's room
(tests/unit/conftest.py says how), so the room folders are the rooms and nothing else.

Named for a module ``<room>/.../<name>.py``: a file under ``tests/unit/<room>/`` whose name
holds ``<name>`` as whole words (``test_<name>.py``, ``test_airflow_<name>.py``,
``test_<name>_<angle>.py``), or anywhere under ``tests/`` ``test_<room>_<name>.py``, or
``test_<name>.py`` when no other room has a module of that name (``loading.py`` is in two,
so ``triggerer/test_loading.py`` does not answer for the state store's). A package's
``__init__.py`` counts as a module only when it defines a function or a class; one that
only gathers names is its room's face, held by test_public_api.py and test_rooms.py.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "sharedstream"
TESTS = ROOT / "tests"
UNIT = TESTS / "unit"
TABLE_HEADING = "## Which test covers what"
ROW = re.compile(r"^\| `(sharedstream[\w.*]*)` \| (.+?) \| (.+?) \|$")
CITED = re.compile(r"`(tests/[\w./-]+\.py)(?:::\w+)?`")


class Module(NamedTuple):
    dotted: str
    room: str
    name: str


def modules() -> list[Module]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            body = ast.parse(path.read_text()).body
            if not any(isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                       for node in body):
                continue
            parts = parts[:-1]
        dotted = ".".join(("sharedstream", *parts))
        room = parts[0] if parts else "__init__"
        found.append(Module(dotted, room, parts[-1] if parts else "sharedstream"))
    return found


def all_test_files() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def has_own_test(module: Module, files: list[Path], name_count: Counter[str]) -> bool:
    room_dir = UNIT / module.room
    for path in files:
        words = f"_{path.stem.removeprefix('test_')}_"
        if room_dir in path.parents and f"_{module.name}_" in words:
            return True
        if path.stem == f"test_{module.room}_{module.name}":
            return True
        if path.stem == f"test_{module.name}" and name_count[module.name] == 1:
            return True
    return False


def table_rows() -> dict[str, tuple[str, str]]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert TABLE_HEADING in text, f"docs/architecture.md has no '{TABLE_HEADING}' section"
    section = text.split(TABLE_HEADING, 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        match = ROW.match(line)
        if match:
            rows[match[1]] = (match[2], match[3])
    return rows


def listed(module: Module, rows: dict[str, tuple[str, str]]) -> bool:
    """A row names the module, or the package it is in with ``.*`` (the migrations)."""
    return module.dotted in rows or any(
        key.endswith(".*") and module.dotted.startswith(key[:-1]) for key in rows)


def test_every_module_has_a_test_named_for_it_or_a_line_in_the_table() -> None:
    files = all_test_files()
    everything = modules()
    name_count = Counter(module.name for module in everything)
    rows = table_rows()
    missing = [module.dotted for module in everything
               if not has_own_test(module, files, name_count) and not listed(module, rows)]
    assert not missing, (
        "no test file named for these modules: add tests/unit/<room>/test_<module>.py, or a "
        f"line in docs/architecture.md's '{TABLE_HEADING}' table: {missing}")


def test_every_line_of_the_table_names_a_module_and_an_existing_test() -> None:
    dotted = {module.dotted for module in modules()}
    problems = []
    for key, (covered_by, why) in table_rows().items():
        if key.endswith(".*"):
            if not any(name.startswith(key[:-1]) for name in dotted):
                problems.append(f"{key}: no module in that package")
        elif key not in dotted:
            problems.append(f"{key}: no such module (moved or removed?)")
        cited = CITED.findall(covered_by)
        if not cited:
            problems.append(f"{key}: names no test file (`tests/...py`)")
        problems += [f"{key}: {path} does not exist" for path in cited
                     if not (ROOT / path).is_file()]
        if not why.strip():
            problems.append(f"{key}: says not why it has no test of its own")
    assert not problems, problems


def test_the_unit_folders_are_the_rooms() -> None:
    rooms = {path.name if path.is_dir() else path.stem for path in SRC.iterdir()
             if (path.is_dir() and (path / "__init__.py").exists())
             or (path.suffix == ".py" and path.name != "__init__.py")}
    folders = {path.name for path in UNIT.iterdir()
               if path.is_dir() and path.name != "__pycache__"}
    assert folders <= rooms, (
        f"tests/unit/ folders that are no room of src/sharedstream: {sorted(folders - rooms)}; "
        "a unit test goes in the folder of its module's room")


def test_no_two_test_files_share_a_name() -> None:
    names = Counter(path.name for path in TESTS.rglob("*.py") if path.name != "conftest.py")
    assert not [name for name, count in names.items() if count > 1], (
        "the test folders are not packages: pytest cannot import two modules of one name")
