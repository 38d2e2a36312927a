"""Value deserialisers a watcher declares (``value_deserializer=``), decoded once per message.

``TextValue`` and ``JsonValue`` need nothing extra; ``AvroValue``, ``JsonSchemaValue``
and ``ProtobufValue`` read Confluent-framed values through a schema registry configured
in ``[schema_registries.<id>]`` (install ``sharedstream[schema-registry]``). Any of them
can hand the filter a model (a dataclass, ``msgspec.Struct`` or pydantic model) validated
on decode. See :mod:`sharedstream.serde.values` for which failure rejects a message and
which holds it.
"""

from sharedstream.core.message import ValueDecodeError, ValueDecoder
from sharedstream.serde.lookups import SchemaNotFound, SchemaRegistryUnavailable
from sharedstream.serde.models import to_payload
from sharedstream.serde.registries import (
    DEFAULT_REGISTRY,
    RegistryConfigError,
    configure_schema_registries,
    registry_problems,
)
from sharedstream.serde.values import (
    AvroValue,
    JsonSchemaValue,
    JsonValue,
    ProtobufValue,
    TextValue,
    framed_schema_id,
)

__all__ = [
    "DEFAULT_REGISTRY",
    "AvroValue",
    "JsonSchemaValue",
    "JsonValue",
    "ProtobufValue",
    "RegistryConfigError",
    "SchemaNotFound",
    "SchemaRegistryUnavailable",
    "TextValue",
    "ValueDecodeError",
    "ValueDecoder",
    "configure_schema_registries",
    "framed_schema_id",
    "registry_problems",
    "to_payload",
]
