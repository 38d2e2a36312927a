"""Issue 27's decode once and issue 30's typed values: the logic, without services.

The message every watcher of a group receives keeps what was decoded from it, so a
second ask (this watcher's or a sibling's) does not decode again; a value that does not
decode is a ``ValueDecodeError`` with the reason the watcher rejects it with. The real
path (a ``sharedstream run`` on the broker) is tests/integration/test_serde_values.py.
"""

from __future__ import annotations

import copy
import pickle
from dataclasses import dataclass
from typing import Any

import msgspec
import pydantic
import pytest

from sharedstream.core.message import KafkaMessage, ValueDecodeError
from sharedstream.serde import AvroValue, JsonValue, framed_schema_id, to_payload
from sharedstream.serde.registries import RegistryConfigError, resolve_registry
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class Counting:
    """A decoder that counts its decodes (equal instances are one decoder)."""

    name: str

    def decode(self, value: bytes, message: KafkaMessage) -> Any:
        CALLS[self.name] = CALLS.get(self.name, 0) + 1
        if value == b"bad":
            raise ValueDecodeError(f"{self.name}: bad")
        return value.upper()


CALLS: dict[str, int] = {}


def message(value: bytes | None) -> KafkaMessage:
    return KafkaMessage("orders", 0, 7, 1_700_000_000_000, None, value)


def test_constructors_equality_and_unpacking_are_the_ten_fields() -> None:
    by_keyword = KafkaMessage(topic="orders", partition=0, offset=7,
                              timestamp=1_700_000_000_000, key=None, value=b"{}")
    positional = message(b"{}")
    assert by_keyword == positional == ("orders", 0, 7, 1_700_000_000_000, None, b"{}", (), 0,
                                        None, 1)
    assert positional.json == {}
    assert by_keyword == positional and hash(by_keyword) == hash(positional)
    assert len(positional) == 10 and KafkaMessage._fields[-1] == "delivery"


def test_equal_decoders_decode_once_per_message_and_failures_are_kept() -> None:
    CALLS.clear()
    m = message(b"abc")
    assert [m.decoded(Counting("a")) for _ in range(3)] == [b"ABC"] * 3
    assert m.decoded(Counting("b")) == b"ABC"
    assert CALLS == {"a": 1, "b": 1}
    bad = message(b"bad")
    for _ in range(2):
        with pytest.raises(ValueDecodeError, match="a: bad"):
            bad.decoded(Counting("a"))
    assert CALLS["a"] == 2


def test_text_and_json_are_shared_and_name_what_is_wrong() -> None:
    m = message(b'{"id": 1}')
    assert m.json is m.json and m.text == '{"id": 1}'
    assert message(None).json is None and message(None).text is None
    with pytest.raises(ValueDecodeError, match=r"^not UTF-8$"):
        message(b"\xff").text  # noqa: B018
    with pytest.raises(ValueDecodeError, match=r"^not JSON: Expecting value: line 1 column 1"):
        message(b"nope").json  # noqa: B018


def test_a_redelivery_keeps_the_decodes_and_a_copy_or_pickle_carries_none() -> None:
    CALLS.clear()
    m = message(b"abc")
    m.decoded(Counting("a"))
    retry = m._replace(delivery=2)
    assert retry.is_retry and retry.decoded(Counting("a")) == b"ABC" and CALLS == {"a": 1}
    assert m._replace(value=b"xyz").decoded(Counting("a")) == b"XYZ" and CALLS == {"a": 2}
    assert pickle.loads(pickle.dumps(m)).__dict__ == {} and copy.copy(m).__dict__ == {}


class OrderStruct(msgspec.Struct):
    id: int
    lines: list[int]


class OrderModel(pydantic.BaseModel):
    id: int
    lines: list[int]


@dataclass
class OrderData:
    id: int
    lines: list[int]


@pytest.mark.parametrize(("model", "reason"), [
    (OrderStruct, "OrderStruct: Expected `int`, got `str` - at `$.lines[1]`"),
    (OrderData, "OrderData: Expected `int`, got `str` - at `$.lines[1]`"),
    (OrderModel, "OrderModel: Input should be a valid integer, unable to parse string as an "
                 "integer - at `$.lines[1]`"),
])
def test_a_model_is_validated_on_decode_with_the_field_path(model: type[Any], reason: str
                                                            ) -> None:
    good = message(b'{"id": 1, "lines": [1, 2]}').decoded(JsonValue(model))
    assert isinstance(good, model) and to_payload(good) == {"id": 1, "lines": [1, 2]}
    with pytest.raises(ValueDecodeError) as failed:
        message(b'{"id": 1, "lines": [1, "two"]}').decoded(JsonValue(model))
    assert failed.value.reason == reason


def test_registry_framing_is_checked_before_any_lookup() -> None:
    assert framed_schema_id(b"\x00\x00\x00\x01\x00\x02") == 256
    with pytest.raises(ValueDecodeError, match="first byte 0x7b, expected 0x00"):
        message(b'{"id": 1}').decoded(AvroValue(registry="nowhere"))
    with pytest.raises(ValueDecodeError, match="3 bytes, a framed value has 6 or more"):
        message(b"\x00\x00\x01").decoded(AvroValue(registry="nowhere"))


def test_registry_connections_come_from_the_file_and_the_environment() -> None:
    tables = {"sr": {"url": "http://file:8081", "timeout": 9}}
    env = {"SHAREDSTREAM_SCHEMA_REGISTRY_SR__BASIC_AUTH_USER_INFO": "a:b",
           "SHAREDSTREAM_SCHEMA_REGISTRY_SR__TIMEOUT": "3"}
    assert resolve_registry("sr", tables, env) == {
        "url": "http://file:8081", "timeout": 3, "max.retries": 0, "basic.auth.user.info": "a:b"}
    with pytest.raises(RegistryConfigError, match=r"add \[schema_registries.other\] .* "
                                                  "SHAREDSTREAM_SCHEMA_REGISTRY_OTHER__URL"):
        resolve_registry("other", tables, {})


def test_the_deserialiser_is_the_filter_s_argument_and_rebuilds() -> None:
    plain = KafkaSharedStreamTrigger(topics=["orders"])
    typed = KafkaSharedStreamTrigger(topics=["orders"], value_deserializer=JsonValue(OrderData))
    assert "value_deserializer" not in plain.serialize()[1]
    classpath, kwargs = typed.serialize()
    assert KafkaSharedStreamTrigger(**kwargs).serialize() == (classpath, kwargs)
    assert typed.shared_stream_arguments() == plain.shared_stream_arguments()


def test_config_show_lists_registry_keys_with_their_source_and_masks_secrets(
        tmp_path: Any) -> None:
    from sharedstream.triggerer.config_view import effective_settings

    path = tmp_path / "sharedstream.toml"
    path.write_text('[schema_registries.prod]\nurl = "https://u:pw@sr:8081"\n'
                    '"basic.auth.user.info" = "alice:s3cret"\n')
    var = "SHAREDSTREAM_SCHEMA_REGISTRY_PROD__BEARER_AUTH_TOKEN"
    _, settings = effective_settings(path, {var: "tok"})
    shown = {(s.key, s.value, s.source) for s in settings
             if s.section == "schema_registries.prod"}
    assert shown == {("basic.auth.user.info", "***", str(path)),
                     ("bearer.auth.token", "***", var),
                     ("url", "https://u:***@sr:8081", str(path))}
