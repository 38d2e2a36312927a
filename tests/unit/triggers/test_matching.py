"""``match=`` on the Kafka triggers: data that round-trips, not part of the group's key,
and checked against the declared value type before anything runs (one error line)."""

from __future__ import annotations

import dataclasses
import enum
import textwrap
from pathlib import Path
from typing import Any

import msgspec
import pydantic
import pytest

from sharedstream import KafkaMessageTrigger, KafkaSharedStreamTrigger
from sharedstream.core.routing import MatchError, compile_match
from sharedstream.serde import AvroValue, JsonValue
from sharedstream.triggerer.loading import WatcherLoadError, load_watcher_module
from sharedstream.triggers.matching import check_value_fields

pytestmark = pytest.mark.unit

class Level(enum.IntEnum):
    LOW = 1


PAID = {"value": {"status": ["paid"], "amount": [{"numeric": [">", 10]}]}}


def test_match_round_trips_through_serialize_and_is_not_part_of_the_key() -> None:
    trigger = KafkaSharedStreamTrigger(topics=["orders"], match=PAID)
    classpath, kwargs = trigger.serialize()
    assert kwargs["match"] == PAID
    assert KafkaSharedStreamTrigger(**kwargs).serialize() == (classpath, kwargs)
    plain = KafkaSharedStreamTrigger(topics=["orders"])
    assert "match" not in plain.serialize()[1]
    assert trigger.shared_stream_key() == plain.shared_stream_key()
    assert trigger.shared_stream_arguments() == plain.shared_stream_arguments()


def test_the_airflow_way_takes_a_match_too() -> None:
    trigger = KafkaMessageTrigger(topics=["orders"], apply_function="json.loads",
                                  match={"key": ["eu-1"]})
    assert trigger.match == {"key": ["eu-1"]}
    assert KafkaMessageTrigger(**trigger.serialize()[1]).match == {"key": ["eu-1"]}


def test_a_match_is_kept_as_plain_json_data() -> None:
    trigger = KafkaSharedStreamTrigger(topics=["t"], match={"key": ("a", "b")})
    assert trigger.match == {"key": ["a", "b"]}
    with pytest.raises(MatchError, match=r"^match: not JSON data"):
        KafkaSharedStreamTrigger(topics=["t"], match={"key": [{"a"}]})


def test_a_match_is_a_copy_of_plain_values_and_refuses_what_json_cannot_say() -> None:
    class Tier(enum.StrEnum):
        GOLD = "gold"

    given = {"value": {"tier": (Tier.GOLD,), "n": [{"numeric": [">", Level.LOW]}]}}
    match = KafkaSharedStreamTrigger(topics=["t"], match=given).match
    assert match == {"value": {"tier": ["gold"], "n": [{"numeric": [">", 1]}]}}
    assert type(match["value"]["tier"][0]) is str
    assert type(match["value"]["n"][0]["numeric"][1]) is int
    given["value"]["tier"] = ("silver",)  # the caller's object changing later changes nothing
    assert match["value"]["tier"] == ["gold"]
    for bad, why in [({"key": [float("nan")]}, "nan is not a JSON number"),
                     ({"key": [b"eu"]}, "bytes b'eu' is not JSON")]:
        with pytest.raises(MatchError, match=rf"^match: not JSON data \({why}\)$"):
            KafkaSharedStreamTrigger(topics=["t"], match=bad)
    with pytest.raises(MatchError, match=r"^match: at the top of the match: field names are text"):
        KafkaSharedStreamTrigger(topics=["t"], match={1: ["x"]})


def test_a_triggers_match_is_compiled_once_for_every_later_compile() -> None:
    """The group's declaration, the subscription and the value-field check compile the
    trigger's match again: they get the rules made when the trigger was (the same
    object); an equal match that is another object is compiled afresh."""
    match = KafkaSharedStreamTrigger(topics=["t"], match={"key": ["a"]}).match
    rules = compile_match(match)
    assert compile_match(match) is rules
    assert compile_match({"key": ["a"]}) == rules and compile_match({"key": ["a"]}) is not rules


def test_a_bad_match_fails_the_trigger_with_one_line() -> None:
    with pytest.raises(MatchError, match=r"^match: at value.s: unknown operator 'sufix'"):
        KafkaSharedStreamTrigger(topics=["t"], match={"value": {"s": [{"sufix": "x"}]}})


@dataclasses.dataclass
class Line:
    sku: str
    qty: int


@dataclasses.dataclass
class Order:
    status: str
    lines: list[Line]
    customer: dict[str, Any]
    note: str | None = None


class OrderStruct(msgspec.Struct, rename={"order_id": "id"}):
    order_id: int
    lines: list[Line]


class OrderModel(pydantic.BaseModel):
    status: str
    total: float = pydantic.Field(alias="grand_total")
    line: Line | None = None


@pytest.mark.parametrize(("model", "path", "problem"), [
    (Order, {"status": ["paid"]}, None),
    (Order, {"lines": {"sku": ["x"]}}, None),          # through the list's elements
    (Order, {"customer": {"anything": ["x"]}}, None),  # a dict: any name
    (Order, {"note": [{"exists": False}]}, None),
    (Order, {"stat": ["paid"]}, "Order has no field 'stat' at the value (its fields there: "
                                "customer, lines, note, status)"),
    (Order, {"lines": {"price": [1]}}, "Order has no field 'price' at lines (its fields "
                                       "there: qty, sku)"),
    (Order, {"status": {"x": ["a"]}}, "Order has no field 'x' at status"),
    (OrderStruct, {"id": [1]}, None),                  # the name it has in JSON
    (OrderStruct, {"order_id": [1]}, "OrderStruct has no field 'order_id'"),
    (OrderModel, {"grand_total": [{"numeric": [">", 1]}]}, None),
    (OrderModel, {"line": {"qty": [1]}}, None),
    (OrderModel, {"line": {"nope": [1]}}, "OrderModel has no field 'nope' at line"),
])
def test_value_fields_are_checked_against_a_model(model: type, path: dict[str, Any],
                                                  problem: str | None) -> None:
    match = {"value": path}
    if problem is None:
        check_value_fields(match, JsonValue(model=model))
        return
    with pytest.raises(MatchError) as raised:
        check_value_fields(match, JsonValue(model=model))
    assert problem in str(raised.value) and "\n" not in str(raised.value)


def test_value_fields_need_a_json_value() -> None:
    check_value_fields({"value": {"s": ["x"]}}, None)
    check_value_fields({"key": ["x"]}, AvroValue(model=Order))
    with pytest.raises(MatchError, match=r"value.s reads the value as JSON, and this "
                                         r"watcher's values are AvroValue"):
        check_value_fields({"value": {"s": ["x"]}}, AvroValue(model=Order))


HEADER = '''
import dataclasses
import enum
from sharedstream import Asset, AssetWatcher, KafkaSharedStreamTrigger
from sharedstream.serde import JsonValue

@dataclasses.dataclass
class Order:
    status: str
'''


def write(tmp_path: Path, body: str) -> str:
    path = tmp_path / "watchers.py"
    path.write_text(HEADER + textwrap.dedent(body))
    return str(path)


def test_loading_names_the_watcher_and_the_field_its_value_cannot_have(tmp_path: Path) -> None:
    target = write(tmp_path, '''
        orders = Asset("orders", watchers=[AssetWatcher("paid", KafkaSharedStreamTrigger(
            topics=["orders"], value_deserializer=JsonValue(model=Order),
            match={"value": {"state": ["paid"]}}))])
    ''')
    with pytest.raises(WatcherLoadError) as raised:
        load_watcher_module(target)
    assert str(raised.value) == (
        f"{target}: watcher 'paid': match: value.state: Order has no field 'state' at the "
        "value (its fields there: status)")


def test_loading_a_bad_match_points_at_the_line_that_built_the_trigger(tmp_path: Path) -> None:
    target = write(tmp_path, '''
        orders = Asset("orders", watchers=[AssetWatcher("paid", KafkaSharedStreamTrigger(
            topics=["orders"], match={"key": [7]}))])
    ''')
    with pytest.raises(WatcherLoadError, match=r"import failed at .*watchers.py:\d+: MatchError: "
                                               r'match: at key: key values are text: write "7"'):
        load_watcher_module(target)
