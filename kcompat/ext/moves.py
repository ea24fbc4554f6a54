"""The records a produce takes out to move them, a column per field.

Theory of operation
-------------------
``holes.split`` takes each delayed record (or each record of a retry topic)
out of its batch as a move: when it is due, where it goes, its key, value
and headers as produced. A pipelined produce keeps its moves through two
commits — its batch's, then the schedule log's — while the loop turns many
times, so how the moves are held decides what the garbage collector walks.
An object per record (a named tuple, even a plain one until the collector
has looked at it once) is one more object for every young collection, and a
named tuple for every middle one too, tens of thousands at a time under a
delayed producer. ``Moves`` holds them in columns instead: numbers in
``array`` columns (which the collector never tracks), bytes in two lists,
the few schedule ids in two columns (their indexes, found by bisection
when a batch is cut in chunks) — a handful of objects per batch,
whatever its record count. ``Move`` names one record's fields, for tests and
the slow paths (``iter(moves)``).

Pure: values in, values out.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterator
from typing import NamedTuple

from kcompat.ext.retry import Headers
from kcompat.wire.records import (
    Record,
    decode_record_at,
    encode_headers,
    encode_key_value,
    encode_raw_record,
)


class Move(NamedTuple):
    """One record taken out (made from ``Moves`` on demand)."""

    offset: int  # its hole: its offset in the produced batch
    timestamp: int
    body: bytes  # its key and value as produced, each with its length varint
    header_count: int
    header_bytes: bytes  # its headers as produced, without their count
    due_ms: int
    schedule_id: str | None = None
    headers: Headers | None = None  # delivered with these; None: its own
    topic: str | None = None  # delivered there; None: its own topic-partition
    partition: int = -1  # with ``topic``: this partition if it has it
    retry: bool = False  # a retry (counted as such)

    @classmethod
    def of(cls, record: Record, due_ms: int, schedule_id: str | None = None,
           headers: Headers | None = None, topic: str | None = None, partition: int = -1,
           retry: bool = False) -> Move:
        """The move of a decoded ``record``."""
        return cls(record.offset, record.timestamp, encode_key_value(record.key, record.value),
                   len(record.headers), encode_headers(record.headers), due_ms, schedule_id,
                   headers, topic, partition, retry)

    @property
    def record(self) -> Record:
        """The record as produced (decoded: for tests and slow paths)."""
        raw = encode_raw_record(0, 0, self.body, self.header_count, self.header_bytes)
        decoded = decode_record_at(raw, 0)
        return Record(self.offset, self.timestamp, decoded.key, decoded.value, decoded.headers)


# a retry topic's move: delivered with these headers, to that topic and
# partition (None, -1: its own), a retry or a dead letter
Route = tuple["Headers | None", "str | None", int, bool]


class Moves:
    """The moves of one batch, a column per field (see the module); a retry
    topic's also have a ``Route`` each (``routes``, else None)."""

    __slots__ = ("offsets", "timestamps", "bodies", "header_counts", "header_bytes", "dues",
                 "id_rows", "id_names", "routes")

    def __init__(self, routed: bool = False) -> None:
        self.offsets = array("q")
        self.timestamps = array("q")
        self.bodies: list[bytes] = []
        self.header_counts = array("q")
        self.header_bytes: list[bytes] = []
        self.dues = array("q")
        # the moves with a kc-schedule-id: their indexes, increasing, and their ids
        self.id_rows = array("q")
        self.id_names: list[str] = []
        self.routes: list[Route] | None = [] if routed else None

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, move: Move) -> None:
        """One more (a slow path's: ``split``'s loops append to the columns)."""
        if move.schedule_id is not None:
            self.id_rows.append(len(self.offsets))
            self.id_names.append(move.schedule_id)
        self.offsets.append(move.offset)
        self.timestamps.append(move.timestamp)
        self.bodies.append(move.body)
        self.header_counts.append(move.header_count)
        self.header_bytes.append(move.header_bytes)
        self.dues.append(move.due_ms)
        if self.routes is not None:
            self.routes.append((move.headers, move.topic, move.partition, move.retry))

    def chunk(self, start: int, stop: int) -> Moves:
        """Moves ``start`` to ``stop`` (their indexes from 0 again)."""
        out = Moves()
        out.offsets, out.timestamps = self.offsets[start:stop], self.timestamps[start:stop]
        out.bodies, out.header_bytes = self.bodies[start:stop], self.header_bytes[start:stop]
        out.header_counts, out.dues = self.header_counts[start:stop], self.dues[start:stop]
        lo, hi = bisect_left(self.id_rows, start), bisect_left(self.id_rows, stop)
        out.id_rows = array("q", [i - start for i in self.id_rows[lo:hi]])
        out.id_names = self.id_names[lo:hi]
        out.routes = None if self.routes is None else self.routes[start:stop]
        return out

    def ids(self) -> list[tuple[int, str]]:
        """(index, kc-schedule-id) of the moves that have one, in order."""
        return list(zip(self.id_rows, self.id_names, strict=True))

    def __iter__(self) -> Iterator[Move]:
        ids, routes = dict(self.ids()), self.routes
        for i, (offset, timestamp, body, count, block, due) in enumerate(zip(
                self.offsets, self.timestamps, self.bodies, self.header_counts,
                self.header_bytes, self.dues, strict=True)):
            headers, topic, partition, retry = (None, None, -1, False) if routes is None \
                else routes[i]
            yield Move(offset, timestamp, body, count, block, due, ids.get(i), headers, topic,
                       partition, retry)
