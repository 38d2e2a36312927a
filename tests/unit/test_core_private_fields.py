"""No class in ``core/`` or ``kafka/`` reads or writes another object's private fields
(issue 26).

A private field (``_name``) is its class's own business: a class that reaches into
another's (the group into a stream's queue, the manager into a stream's progress
counter) ties the two together so tightly that neither can change alone, and that is
what made the group, the manager and the stream an import circle. Every access of the
form ``x._name`` with ``x`` anything but ``self`` or ``cls`` counts; named tuples'
public methods (``_replace`` and its kin) do not, nor do librdkafka's local error codes
(``KafkaError._ALL_BROKERS_DOWN`` and the like), which are confluent_kafka's public API.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "sharedstream"
CORE = PACKAGE / "core"
KAFKA = PACKAGE / "kafka"
NAMED_TUPLE_API = {"_replace", "_asdict", "_fields", "_make"}


def foreign_private_accesses(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__") and node.attr not in NAMED_TUPLE_API
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                and not _local_error_code(node)):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def _local_error_code(node: ast.Attribute) -> bool:
    return (isinstance(node.value, ast.Name) and node.value.id == "KafkaError"
            and node.attr[1:].isupper())


def test_no_class_in_kafka_touches_another_s_private_fields() -> None:
    assert [hit for path in sorted(KAFKA.glob("*.py"))
            for hit in foreign_private_accesses(path)] == []


def test_no_class_in_core_touches_another_s_private_fields() -> None:
    assert [hit for path in sorted(CORE.glob("*.py"))
            for hit in foreign_private_accesses(path)] == []


def test_the_check_sees_reads_and_writes(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f(stream, entry):\n    stream._queue.append(1)\n"
                      "    entry._state = 2\n    return entry._replace(a=1), stream.__class__,"
                      " KafkaError._SSL\n")
    assert sorted(foreign_private_accesses(module)) == ["m.py:2: stream._queue",
                                                        "m.py:3: entry._state"]
