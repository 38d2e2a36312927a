"""Deprecated: the dead-letter reader lives in :mod:`sharedstream.ops.dlq`.

Kept as an alias for one release so code written against ``sharedstream.dlq`` runs on;
importing it warns (``DeprecationWarning``). It names the same objects: nothing is
copied.
"""

import warnings

from sharedstream.ops.dlq import (
    Coordinates,
    DeadLetter,
    DeadLetterError,
    DeadLetterReader,
    Origin,
    PartitionRange,
    decode_dead_letter,
    read_dead_letters,
)

warnings.warn("sharedstream.dlq is deprecated: import from sharedstream.ops.dlq (the same "
              "names)", DeprecationWarning, stacklevel=2)

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
