"""One name, one class: a reader who greps ``class X`` in the package finds one thing.

Two classes with one name (a web answer model and the core type it shows, a Protocol and
its implementation) make every import a question of which one is meant; the second one
takes a name saying what it is (``AssetOut``, ``OwedShares``).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "sharedstream"


def class_definitions(root: Path) -> dict[str, list[str]]:
    """Class name -> ``file:line`` of every ``class`` statement under ``root``, nested
    ones included."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_class_name_is_defined_twice_in_the_package() -> None:
    twice = {name: places for name, places in class_definitions(SRC).items()
             if len(places) > 1}
    assert twice == {}


def test_the_check_sees_nested_classes_in_other_files(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("class Asset:\n    pass\n")
    (tmp_path / "b.py").write_text("def f():\n    class Asset:\n        pass\n")
    assert class_definitions(tmp_path) == {"Asset": ["a.py:1", "b.py:2"]}
