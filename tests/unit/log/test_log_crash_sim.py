"""Seeded crash simulation of one partition log over the in-memory store.

Each seed runs a random schedule of appends (plain, idempotent and
transactional with markers), syncs (``flush`` and the group-commit path
``dirty_files``), rolls (which sync nothing), truncations, DeleteRecords,
clean reopens and power cuts (``MemoryFileStore.crash``: unsynced writes
lost, torn or garbled). Half the opened logs leave a deletion's file work to a
later step (``defer_io``, as the broker does) that may not come before a cut.
After every reopen: every batch that was synced is still there, byte for byte
(its offsets, epoch and records); the log reads back as contiguous CRC-valid
batches; the epoch cache holds no epoch past the last batch's; the log start never moves back past what was synced.

A failure names the seed. More seeds: ``LOG_SEEDS=20000 pytest tests/unit/log``.
"""

from __future__ import annotations

import os
from pathlib import Path
from random import Random

import pytest

from kcompat.log import LogConfig, PartitionLog
from kcompat.testing.memory_store import MemoryFileStore
from kcompat.wire.batch import compute_crc, iter_headers, parse_header
from kcompat.wire.records import encode_batch, encode_marker_batch

SEEDS = int(os.environ.get("LOG_SEEDS", "400"))
DIR = Path("/data/t-0")


def _batch(rng: Random, pid: int = -1, epoch: int = -1, seq: int = -1,
           txn: bool = False) -> memoryview:
    count = rng.randint(1, 4)
    records = [(None, rng.randbytes(rng.randint(1, 60)), (), 1_000 + i) for i in range(count)]
    raw = encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       transactional=txn)
    return memoryview(raw).toreadonly()


class LogModel:
    """What the log must hold: every appended batch's bytes by base offset, and
    how far it is known durable."""

    def __init__(self, seed: int) -> None:
        self.rng = Random(seed)
        self.store = MemoryFileStore("/data")
        rng = self.rng
        self.config = LogConfig(segment_bytes=rng.choice([300, 700, 5000]),
                                index_interval_bytes=rng.choice([0, 100, 4096]),
                                recovery_chunk_bytes=4096)
        self.log = self._open()
        self.batches: dict[int, bytes] = {}  # base offset -> bytes as read back
        self.durable_end = 0
        self.durable_start = 0
        self.epoch = 0
        self.seq = 0
        self.txn_open = False
        self.pid = 7

    def _open(self) -> PartitionLog:
        log = PartitionLog.open(DIR, self.config, 0, self.store)
        if self.rng.random() < 0.5:  # (set per open: a reopen is a new process)
            log.defer_io = lambda _log: None
        return log

    def append(self, view: memoryview) -> None:
        header = self.log.append(view, parse_header(view), self.epoch, 0)
        self.batches[header.base_offset] = self.log.read_batch_at(header.base_offset)

    def step(self) -> None:
        rng, log = self.rng, self.log
        roll = rng.random()
        if roll < 0.45:
            kind = rng.random()
            if kind < 0.5:
                self.append(_batch(rng))
            elif kind < 0.8:
                view = _batch(rng, self.pid, 0, self.seq)
                self.seq += parse_header(view).last_offset_delta + 1
                self.append(view)
            elif not self.txn_open:
                self.txn_open = True
                view = _batch(rng, self.pid + 1, 0, self.seq, txn=True)
                self.seq += parse_header(view).last_offset_delta + 1
                self.append(view)
            else:
                self.txn_open = False
                marker = encode_marker_batch(rng.random() < 0.5, producer_id=self.pid + 1,
                                             producer_epoch=0, coordinator_epoch=0,
                                             timestamp=1_000)
                self.append(memoryview(marker).toreadonly())
        elif roll < 0.55:
            log.flush()
            self.durable_end = log.log_end_offset
        elif roll < 0.65:
            for f in log.dirty_files():
                f.sync()
            self.durable_end = log.log_end_offset
        elif roll < 0.68:
            log.roll(0)  # syncs nothing: what it rolled out is synced by the next pass
        elif roll < 0.72 and log.log_end_offset > log.log_start_offset:
            cut = rng.randint(log.log_start_offset, log.log_end_offset)
            log.truncate_to(cut)
            self._forget_from(log.log_end_offset)
            self.durable_end = min(self.durable_end, log.log_end_offset)
            self.epoch += 1  # a new leader after a truncation, as in Raft
            self.txn_open = False
            self.seq = 0
            self.pid += 2
        elif roll < 0.74 and log.log_end_offset > log.log_start_offset:
            start = rng.randint(log.log_start_offset, log.log_end_offset)
            log.delete_records_before(start)
            if log.defer_io is None:
                self.durable_start = log.log_start_offset
        elif roll < 0.76:
            work = log.take_deferred_io()  # what the broker's flusher runs off the loop
            if work is not None:
                work.sync()
            self.durable_start = log.log_start_offset
        elif roll < 0.79:
            self.durable_start = log.log_start_offset  # (written by the clean close)
            log.close(clean=True)
            self.log = self._open()
            self.durable_end = self.log.log_end_offset
            self.check()
        elif roll < 0.88:
            self.crash()
        else:
            self.epoch += rng.random() < 0.1

    def crash(self) -> None:
        self.store.crash(self.rng, garble=0.5)
        self.log = self._open()
        self.check()
        self._forget_from(self.log.log_end_offset)
        self.durable_end = self.log.log_end_offset  # what recovery kept is on disk now
        self.durable_start = self.log.log_start_offset
        self.txn_open = False
        self.seq = 0
        self.pid += 2
        self.epoch += 1

    def _forget_from(self, end: int) -> None:
        for base in [b for b in self.batches if b >= end]:
            del self.batches[base]

    def check(self) -> None:
        log = self.log
        assert log.log_end_offset >= self.durable_end, (
            f"synced data lost: log end {log.log_end_offset} < {self.durable_end}")
        # a log start past the durable end falls back to the log end, no further
        assert log.log_start_offset >= min(self.durable_start, log.log_end_offset), (
            f"log start {log.log_start_offset} moved back from {self.durable_start}")
        offset = log.log_start_offset
        seen = []
        while offset < log.log_end_offset:
            chunk = log.read(offset, 1 << 20, log.log_end_offset)
            headers = list(iter_headers(chunk))
            assert headers, f"no batch at {offset}"
            for pos, h in headers:
                raw = chunk[pos:pos + h.size]
                assert compute_crc(memoryview(raw)) == h.crc
                assert h.base_offset == offset or (not seen and h.base_offset < offset), \
                    f"gap: batch at {h.base_offset}, expected {offset}"
                if h.base_offset in self.batches and h.base_offset < self.durable_end:
                    assert raw == self.batches[h.base_offset], f"batch {h.base_offset} changed"
                seen.append(h)
                offset = h.next_offset
        for base, raw in self.batches.items():
            if log.log_start_offset <= base < self.durable_end:
                assert log.read_batch_at(base) == raw
        if seen:
            epochs = dict(log.leader_epochs)
            assert all(e <= seen[-1].partition_leader_epoch for e in epochs)


def run_seed(seed: int) -> None:
    model = LogModel(seed)
    for _ in range(model.rng.randint(20, 120)):
        model.step()
    model.crash()


CHUNK = 100


@pytest.mark.parametrize("first", range(0, SEEDS, CHUNK), ids=lambda s: f"seeds{s}")
def test_log_survives_crashes(first: int) -> None:
    for seed in range(first, min(first + CHUNK, SEEDS)):
        try:
            run_seed(seed)
        except AssertionError as e:
            raise AssertionError(f"log crash seed {seed}: {e}") from e
