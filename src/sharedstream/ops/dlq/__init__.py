"""Dead letters: reading them from your own code (this module), inspecting and replaying
them (``reader.py``, ``replay.py``, and the commands in ``commands.py``).

The public reader API; ``sharedstream.dlq`` is its deprecated alias.

The same reader ``sharedstream dlq inspect|replay`` use: it assigns every
partition itself, reads up to the end offsets seen when it opened and never
commits, so it can run next to the triggerer and the replay tool without moving
anyone's position. Each record comes decoded with its context::

    from sharedstream.ops.dlq import read_dead_letters
    from sharedstream.kafka.connections import resolve_connection

    connection = resolve_connection("kafka_default", {})  # or load_config().connections
    for record in read_dead_letters(connection, "orders.dlq"):
        if record.foreign:                  # written by another tool: no context
            continue
        print(record.origin.topic, record.origin.offset, record.rejections,
              record.replay_count, record.value)

See ``examples/dlq_consumer.py`` for an alerting consumer and docs/dead-letters.md
for the headers.
"""

from sharedstream.core.message import Coordinates
from sharedstream.ops.dlq.reader import (
    DeadLetter,
    DeadLetterError,
    DeadLetterReader,
    PartitionRange,
    decode_dead_letter,
    read_dead_letters,
)

# The name this module gave a dead letter's origin before Coordinates was the one type.
Origin = Coordinates

__all__ = [
    "Coordinates",
    "DeadLetter",
    "DeadLetterError",
    "DeadLetterReader",
    "Origin",
    "PartitionRange",
    "decode_dead_letter",
    "read_dead_letters",
]
