"""Issue 41 §4: a dataclass model means the same whatever else is installed.

Before, a dataclass was validated by msgspec when it was installed, else by pydantic
(which coerces ``"150"`` to ``150.0``), else only by calling the class (unknown fields
refused, types unchecked): the ``web`` extra, which brings pydantic, changed what a
watcher accepted. Each case runs here in four fresh interpreters, hiding pydantic,
msgspec, both or neither from import (a ``sys.meta_path`` finder that refuses them), and
all four must give the same, documented outcome (docs/values.md, "Typed values").
"""

from __future__ import annotations

import enum
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal
from uuid import UUID

import msgspec
import pytest
from cli_lines import SRC, error_line, watcher_module

from sharedstream.core.message import ValueDecodeError
from sharedstream.serde import AvroValue, JsonSchemaValue, JsonValue, ProtobufValue, to_payload
from sharedstream.serde.models import model_converter

pytestmark = pytest.mark.unit

# Each case: a JSON value -> the decoded model's payload, or the rejection's reason.
CASES: list[tuple[object, object]] = [
    ({"id": 1, "amount": 150, "lines": [{"sku": "a", "qty": 2}], "extra": True},
     {"id": 1, "amount": 150.0, "lines": [{"sku": "a", "qty": 2}], "note": None}),
    ({"id": 1, "amount": "150", "lines": []}, "Order: Expected `float`, got `str` - at `$.amount`"),
    ({"id": "1", "amount": 1, "lines": []}, "Order: Expected `int`, got `str` - at `$.id`"),
    ({"id": True, "amount": 1, "lines": []}, "Order: Expected `int`, got `bool` - at `$.id`"),
    ({"id": 1.0, "amount": 1, "lines": []}, "Order: Expected `int`, got `float` - at `$.id`"),
    ({"id": 1, "lines": []}, "Order: Object missing required field `amount`"),
    ([1, 2], "Order: Expected `object`, got `array`"),
    ({"id": 1, "amount": 1, "lines": [{"sku": "a"}]},
     "Order: Object missing required field `qty` - at `$.lines[0]`"),
    ({"id": 1, "amount": 1, "lines": [{"sku": "a", "qty": "2"}]},
     "Order: Expected `int`, got `str` - at `$.lines[0].qty`"),
    ({"id": 1, "amount": 1, "lines": [], "note": 5},
     "Order: Expected `str | null`, got `int` - at `$.note`"),
]

SCRIPT = """
import importlib.abc, json, sys
hidden = set(filter(None, sys.argv[1].split(",")))

class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in hidden:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)")
        return None

sys.meta_path.insert(0, Hide())
from dataclasses import dataclass
from sharedstream.core.message import KafkaMessage, ValueDecodeError
from sharedstream.serde import JsonValue, to_payload

@dataclass
class Line:
    sku: str
    qty: int

@dataclass
class Order:
    id: int
    amount: float
    lines: list[Line]
    note: str | None = None

out = []
for value in json.loads(sys.argv[2]):
    message = KafkaMessage("t", 0, 0, 0, None, json.dumps(value).encode())
    try:
        out.append(to_payload(message.decoded(JsonValue(model=Order))))
    except ValueDecodeError as exc:
        out.append(exc.reason)
print(json.dumps({"loaded": sorted(m for m in ("msgspec", "pydantic") if m in sys.modules),
                  "out": out}))
"""


@pytest.mark.parametrize("hidden", ["", "pydantic", "msgspec", "pydantic,msgspec"])
def test_a_dataclass_model_accepts_and_refuses_the_same_values_whatever_is_installed(
        hidden: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, hidden, json.dumps([value for value, _ in CASES])],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert not set(found["loaded"]) & set(hidden.split(",")), found
    for (value, expected), got in zip(CASES, found["out"], strict=True):
        assert got == expected, (hidden, value)


# -- the dataclass rules themselves (in this interpreter: the rules do not depend on it) --

class Colour(enum.Enum):
    RED = "red"


class Tagged(msgspec.Struct):
    tag: str


@dataclass
class Node:
    name: str
    children: list[Node] = field(default_factory=list)


@dataclass
class Everything:
    when: datetime
    day: date
    id: UUID
    price: Decimal
    raw: bytes
    colour: Colour
    size: Literal["S", "M"]
    pair: tuple[int, str]
    counts: dict[str, int]
    tags: frozenset[str]
    nested: Tagged
    tree: Node
    anything: Any = None


EVERYTHING = {"when": "2026-01-02T03:04:05Z", "day": "2026-01-02",
              "id": "12345678-1234-5678-1234-567812345678", "price": "1.50", "raw": "aGk=",
              "colour": "red", "size": "M", "pair": [1, "a"], "counts": {"a": 1},
              "tags": ["x", "y"], "nested": {"tag": "t"},
              "tree": {"name": "root", "children": [{"name": "leaf"}]}, "unknown": 1}


def test_text_becomes_the_types_a_field_declares_and_back_in_the_payload() -> None:
    value = model_converter(Everything)(EVERYTHING)
    assert value == Everything(
        when=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), day=date(2026, 1, 2),
        id=UUID("12345678-1234-5678-1234-567812345678"), price=Decimal("1.50"), raw=b"hi",
        colour=Colour.RED, size="M", pair=(1, "a"), counts={"a": 1},
        tags=frozenset({"x", "y"}), nested=Tagged("t"),
        tree=Node("root", [Node("leaf")]))
    payload = to_payload(value)
    assert payload["when"] == "2026-01-02T03:04:05+00:00" and payload["raw"] == "aGk="
    assert payload["nested"] == {"tag": "t"} and payload["colour"] == "red"
    assert payload["tree"] == {"name": "root", "children": [{"name": "leaf", "children": []}]}
    assert json.loads(json.dumps(payload)) == payload


@pytest.mark.parametrize(("change", "reason"), [
    ({"when": "2026-01-02"}, "Invalid ISO 8601 datetime - at `$.when`"),
    ({"when": 5}, "Expected `datetime`, got `int` - at `$.when`"),
    ({"id": "zz"}, "Invalid UUID - at `$.id`"),
    ({"price": "x"}, "Invalid decimal string - at `$.price`"),
    ({"raw": "!!"}, "Invalid base64 encoded string - at `$.raw`"),
    ({"colour": "blue"}, "Invalid enum value 'blue' - at `$.colour`"),
    ({"size": "L"}, "Invalid enum value 'L' - at `$.size`"),
    ({"pair": [1]}, "Expected `array` of length 2, got 1 - at `$.pair`"),
    ({"pair": [1, 2]}, "Expected `str`, got `int` - at `$.pair[1]`"),
    ({"counts": {"a": "1"}}, "Expected `int`, got `str` - at `$.counts[...]`"),
    ({"tags": "xy"}, "Expected `array`, got `str` - at `$.tags`"),
    ({"tree": {"name": "r", "children": [{"name": 1}]}},
     "Expected `str`, got `int` - at `$.tree.children[0].name`"),
])
def test_a_value_that_does_not_fit_names_the_field(change: dict[str, Any], reason: str
                                                   ) -> None:
    with pytest.raises(ValueDecodeError) as failed:
        model_converter(Everything)({**EVERYTHING, **change})
    assert failed.value.reason.startswith("Everything: ")
    assert failed.value.reason.removeprefix("Everything: ").endswith(reason)


def test_an_avro_values_own_types_are_taken_as_they_are() -> None:
    when = datetime(2026, 1, 2, tzinfo=UTC)
    value = model_converter(Everything)({**EVERYTHING, "when": when, "price": Decimal("2"),
                                         "raw": b"\x00"})
    assert (value.when, value.price, value.raw) == (when, Decimal("2"), b"\x00")


@dataclass
class Unsupported:
    call: Callable[[], None]


@pytest.mark.parametrize(("declare", "message"), [
    (lambda: JsonValue(model=dict), "JsonValue(model=dict): <class 'dict'> is not a model"),
    (lambda: AvroValue(model=int), "AvroValue(model=int): <class 'int'> is not a model"),
    (lambda: JsonSchemaValue(model=Unsupported),
     "JsonSchemaValue(model=Unsupported): Unsupported.call: type"),
    (lambda: ProtobufValue(dict), "ProtobufValue: message_type <class 'dict'> is not a "
                                  "generated Protobuf message class"),
])
def test_a_model_that_cannot_work_is_refused_when_declared(
        declare: Callable[[], object], message: str) -> None:
    with pytest.raises(TypeError) as refused:
        declare()
    assert str(refused.value).startswith(message), refused.value


def test_check_names_the_declaration_in_one_error_line(tmp_path: Path) -> None:
    module = watcher_module(tmp_path, "JsonValue(model=dict)", "JsonValue")
    (tmp_path / "sharedstream.toml").write_text("")
    line = error_line(tmp_path, "check", "watchers.py")
    assert line.startswith(f"error: watchers.py: import failed at {module}:4: TypeError: "
                           "JsonValue(model=dict): <class 'dict'> is not a model: give a "
                           "dataclass"), line
