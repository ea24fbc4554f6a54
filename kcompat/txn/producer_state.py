"""Idempotent-producer state of one partition (KIP-98), as a pure table.

Theory of operation
-------------------
For every producer id that has written to a partition we remember its current
epoch and the last five batches it appended (first/last sequence and offsets).
Before a batch with a producer id is appended, ``check`` decides:

* the batch repeats one of the cached five  -> ``Duplicate`` (answer with the
  original offsets, append nothing);
* its epoch is older than the producer's    -> INVALID_PRODUCER_EPOCH;
* a new epoch must start at sequence 0       -> OUT_OF_ORDER_SEQUENCE_NUMBER;
* its first sequence does not follow the last one -> OUT_OF_ORDER_SEQUENCE_NUMBER;
* otherwise it is accepted, and after the append ``apply`` records it.

A producer we have never seen (or whose state expired) may start at any
sequence, as in Kafka since KIP-360. Replaying batch headers through ``apply``
rebuilds the table, so a snapshot plus the log tail restores it after a crash.
Sequences are 31-bit and wrap to 0 after Int32.MAX.

Transactions (KIP-98): the first transactional batch of a producer opens its
transaction at that offset; the commit or abort marker (a control batch, whose
type the caller decodes and passes to ``apply``) closes it and ``apply``
returns the ``CompletedTxn``. The smallest open first offset is the partition's
first unstable offset, which bounds the last stable offset (LSO).
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field

from kcompat.wire.batch import NO_SEQUENCE, BatchHeader

CACHED_BATCHES = 5
_SEQ_MODULUS = 1 << 31


class SequenceError(Exception):
    """A batch Kafka would refuse; ``error`` is the Kafka error name."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error  # "out_of_order_sequence_number" | "invalid_producer_epoch"


@dataclass(frozen=True, slots=True)
class CachedBatch:
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class Duplicate:
    """The batch was already appended: answer with these offsets."""

    base_offset: int
    last_offset: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[CachedBatch] = field(default_factory=lambda: deque(maxlen=CACHED_BATCHES))
    last_timestamp: int = -1
    txn_first_offset: int = -1  # first offset of the open transaction, -1 if none

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE


def _follows(last_seq: int, first_seq: int) -> bool:
    return first_seq == (last_seq + 1) % _SEQ_MODULUS


class ProducerStateTable:
    """Per-partition producer id -> ProducerEntry."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, header: BatchHeader) -> Duplicate | None:
        """Validate a batch before its append; raises SequenceError."""
        if header.producer_id < 0 or header.base_sequence == NO_SEQUENCE:
            return None
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return None
        if header.producer_epoch < entry.epoch:
            raise SequenceError(
                "invalid_producer_epoch",
                f"epoch {header.producer_epoch} is older than {entry.epoch}",
            )
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise SequenceError(
                    "out_of_order_sequence_number",
                    f"new epoch {header.producer_epoch} must start at sequence 0",
                )
            return None
        for cached in entry.batches:
            if cached.first_seq == header.base_sequence and cached.last_seq == header.last_sequence:
                return Duplicate(cached.base_offset, cached.last_offset, cached.max_timestamp)
        if entry.batches and not _follows(entry.last_seq, header.base_sequence):
            raise SequenceError(
                "out_of_order_sequence_number",
                f"expected sequence {(entry.last_seq + 1) % _SEQ_MODULUS}, "
                f"got {header.base_sequence}",
            )
        return None

    def apply(self, header: BatchHeader, marker_aborts: bool | None = None) -> CompletedTxn | None:
        """Record an appended batch (``header.base_offset`` is the assigned one).
        For a control batch, ``marker_aborts`` says whether it is an abort
        marker; the transaction it closes is returned."""
        if header.producer_id < 0:
            return None
        entry = self.producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            open_at = entry.txn_first_offset if entry is not None else -1
            entry = ProducerEntry(epoch=header.producer_epoch, txn_first_offset=open_at)
            self.producers[header.producer_id] = entry
        elif header.producer_epoch < entry.epoch:
            return None
        entry.last_timestamp = header.max_timestamp
        if header.is_control:
            return self._close_txn(header, entry, bool(marker_aborts))
        if header.is_transactional and entry.txn_first_offset < 0:
            entry.txn_first_offset = header.base_offset
        if header.base_sequence == NO_SEQUENCE:
            return None
        entry.batches.append(
            CachedBatch(
                header.base_sequence,
                header.last_sequence,
                header.base_offset,
                header.last_offset,
                header.max_timestamp,
            )
        )
        return None

    @staticmethod
    def _close_txn(header: BatchHeader, entry: ProducerEntry, aborts: bool) -> CompletedTxn | None:
        first = entry.txn_first_offset
        entry.txn_first_offset = -1
        if first < 0:
            return None  # no open transaction here (a repeated marker)
        return CompletedTxn(header.producer_id, first, header.base_offset, aborts)

    def first_unstable_offset(self) -> int | None:
        """Smallest first offset of an open transaction, or None."""
        opens = [e.txn_first_offset for e in self.producers.values() if e.txn_first_offset >= 0]
        return min(opens) if opens else None

    def open_transaction(self, producer_id: int) -> int:
        entry = self.producers.get(producer_id)
        return entry.txn_first_offset if entry is not None else -1

    def to_snapshot(self) -> bytes:
        doc = {
            str(pid): {
                "epoch": e.epoch,
                "last_timestamp": e.last_timestamp,
                "txn_first_offset": e.txn_first_offset,
                "batches": [
                    [b.first_seq, b.last_seq, b.base_offset, b.last_offset, b.max_timestamp]
                    for b in e.batches
                ],
            }
            for pid, e in self.producers.items()
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_snapshot(cls, data: bytes) -> ProducerStateTable:
        table = cls()
        for pid, doc in json.loads(data).items():
            entry = ProducerEntry(epoch=int(doc["epoch"]), last_timestamp=int(doc["last_timestamp"]),
                                  txn_first_offset=int(doc.get("txn_first_offset", -1)))
            for b in doc["batches"]:
                entry.batches.append(CachedBatch(*(int(x) for x in b)))
            table.producers[int(pid)] = entry
        return table
