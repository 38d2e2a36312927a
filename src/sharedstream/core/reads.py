"""A consumed batch as the consumer thread hands it over: runs of one partition's reads.

``Records.items`` is a sequence of ``(raw, payload)`` pairs. An adapter whose message is
its own payload (a Kafka first read: nearly every record) can instead give a
:class:`ReadBatch`: the same sequence to any reader, but kept as stretches of one
partition's reads (:class:`PartitionRun`), so that the consumer thread builds no pair
per record and the ledger admits a whole run with a few list operations
(:meth:`sharedstream.core.ledger.Ledger.admit`) instead of a Python step per record.

Failure window: none; plain data, built on the consumer thread and read on the loop.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol, overload

from sharedstream.core.partition import Key


class LedgerRecord(Protocol):
    """What the ledger needs of a record: where it was read, and in which generation."""

    @property
    def partition_key(self) -> Key: ...

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def offset(self) -> int: ...

    @property
    def generation(self) -> int: ...

    @property
    def targets(self) -> frozenset[str] | None:
        """The watchers it is addressed to (a replayed dead letter), or None for all."""


class PartitionRun:
    """Reads of one partition in one generation, consecutive in a consumed batch, in
    offset order; each read is its own message and payload.

    ``size`` is the key and value bytes of all of them (what ``size()`` of the adapter
    gives per message, summed where the records were read), ``last`` the last offset.
    """

    __slots__ = ("generation", "key", "last", "reads", "size")

    def __init__(self, key: Key, generation: int) -> None:
        self.key = key
        self.generation = generation
        self.reads: list[Any] = []
        self.size = 0
        self.last = -1

    def __repr__(self) -> str:
        return f"PartitionRun({self.key}, gen={self.generation}, {len(self.reads)} reads)"


class ReadBatch(Sequence[tuple[Any, Any]]):
    """``Records.items`` in parts: a :class:`PartitionRun`, or one ``(raw, payload)`` pair
    (a message that is not its own payload: a replayed dead letter), in read order.

    Iterating or indexing gives the pairs, ``(read, read)`` for a run's reads; the ledger
    reads ``parts`` directly. Indexing walks the parts (tests and slow paths only).
    """

    __slots__ = ("_n", "parts")

    def __init__(self, parts: list[PartitionRun | tuple[Any, Any]], n: int) -> None:
        self.parts = parts
        self._n = n  # how many records, over every part

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        for part in self.parts:
            if isinstance(part, tuple):
                yield part
            else:
                for read in part.reads:
                    yield (read, read)

    @overload
    def __getitem__(self, index: int) -> tuple[Any, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[tuple[Any, Any]]: ...
    def __getitem__(self, index: int | slice) -> tuple[Any, Any] | list[tuple[Any, Any]]:
        pairs = list(self)
        return pairs[index]

    def __repr__(self) -> str:
        return f"ReadBatch({self._n} records in {len(self.parts)} parts)"

    @staticmethod
    def joined(batches: Sequence[Sequence[tuple[Any, Any]]]) -> ReadBatch:
        """Batches read one after another, as one: their parts in read order (the ledger
        admits one slice per partition of it, core/ledger.py). O(parts), no record
        copied; a batch of plain pairs joins as pairs."""
        parts: list[PartitionRun | tuple[Any, Any]] = []
        n = 0
        for batch in batches:
            if type(batch) is ReadBatch:
                parts += batch.parts
            else:
                parts += batch
            n += len(batch)
        return ReadBatch(parts, n)


__all__ = ["PartitionRun", "ReadBatch"]
