"""Delayed delivery's CPU per record on the schedule partition's leader, in process.

What ``DelayService._serve_target`` does per delivery batch, without the network or
Raft: a schedule log of ``--records`` delayed records (100 B values, ``kc-delay-ms``
drawn from ``--delay-lo-ms``..``--delay-hi-ms``) in ``adds`` batches of 2,000 as a
produce writes them, stored in a real file; then, everything due at once (a backlog),
delivery batch after batch: what is due, the records' stored bytes (``tails``), the
``out`` record applied, the delivery batch framed, the lateness observed, ``done``
applied. Prints microseconds per delivered record, reads per record, and with
``--profile`` the top of a cProfile of the delivery loop. Nothing is appended to
bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import sys
import tempfile
import time
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.compare import loadavg  # noqa: E402
from kcompat.broker.ext.delays import DELIVERY_BATCH, DELIVERY_BYTES, LATENESS_BUCKETS_S  # noqa: E402
from kcompat.broker.ext.lateness import BatchLateness  # noqa: E402
from kcompat.ext.schedule_adds import adds_batch  # noqa: E402
from kcompat.ext.schedule_log import ScheduleLog, done_record, out_record  # noqa: E402
from kcompat.ext.schedule_stored import (  # noqa: E402
    StoredRecords,
    delivery_batch,
    take_tails_within,
)
from kcompat.wire.records import encode_batch, encode_headers, record_tail  # noqa: E402

T = ("soak-delayed", 0)
PER_BATCH = 2_000


@dataclass(frozen=True)
class _Slice:
    file: _File
    position: int
    length: int


class _File:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def pread(self, size: int, position: int) -> bytes:
        return os.pread(self.fd, size, position)


class _Log:
    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT)
        self.file = _File(self.fd)
        self.bases: list[int] = []
        self.positions: list[int] = []
        self.size = 0

    def append(self, batch: bytes, base: int) -> None:
        self.bases.append(base)
        self.positions.append(self.size)
        os.pwrite(self.fd, batch, self.size)
        self.size += len(batch)

    def batch_slice(self, offset: int) -> _Slice:
        i = bisect_right(self.bases, offset) - 1
        end = self.positions[i + 1] if i + 1 < len(self.positions) else self.size
        return _Slice(self.file, self.positions[i], end - self.positions[i])


def build(n: int, lo_ms: int, hi_ms: int, log: _Log) -> tuple[ScheduleLog, int]:
    rng = random.Random(31)
    machine = ScheduleLog()
    offset = 0
    value = b"v" * 100
    for first in range(0, n, PER_BATCH):
        k = min(PER_BATCH, n - first)
        parts = [(1_000 + i, record_tail(b"\x00" + b"\xc8\x01" + value, 2, encode_headers(
            (("kc-delay-ms", b"%d" % rng.randint(lo_ms, hi_ms)),
             ("kc-scheduled-offset", b"%d" % (first + i))))))
                 for i in range(first, first + k)]
        dues = [1_000 + i // 70 + rng.randint(lo_ms, hi_ms) for i in range(first, first + k)]
        batch = adds_batch(T, (7, 0, first), parts, list(range(first, first + k)), dues)
        batch = bytearray(batch)
        batch[0:8] = offset.to_bytes(8, "big")  # its base offset in the log
        log.append(bytes(batch), offset)
        machine.apply_stored(bytes(batch))
        offset += k + 1
    return machine, offset


def deliver(machine: ScheduleLog, log: _Log, offset: int, now: int, step_ms: int
            ) -> tuple[int, int]:
    """The leader's delivery loop over everything due at ``now`` (``step_ms``:
    from the earliest due time, ``now`` ahead by that much per round, as
    when on time); (records moved, reads)."""
    end = now
    if step_ms:
        now = machine.next_due_ms() or now
    stored = StoredRecords(log.batch_slice)
    lateness = BatchLateness("lateness", "", LATENESS_BUCKETS_S)
    moved = 0
    while True:
        targets = machine.due_targets(now)
        if not targets and not machine.schedule.promoting(now):
            if now >= end:
                break
            now += step_ms
            continue
        entries = machine.schedule.due(now, DELIVERY_BATCH, T)
        if not entries:
            continue
        tails = stored.tails(entries)
        k = take_tails_within(tails, DELIVERY_BYTES)
        out = encode_batch([out_record(T, entries[:k], now)], base_offset=offset)
        offset += 1
        machine.apply_stored(out)
        delivery = machine.inflight[T]
        delivery_batch(tails[:k], 1 << 62, delivery.seq)
        lateness.observe_dues(now, [p.due_ms for p in delivery.entries])
        machine.apply_stored(encode_batch([done_record(T, delivery.seq, now)],
                                          base_offset=offset))
        offset += 1
        moved += len(delivery.entries)
    return moved, stored.reads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--delay-lo-ms", type=int, default=5_000)
    ap.add_argument("--delay-hi-ms", type=int, default=60_000)
    ap.add_argument("--step-ms", type=int, default=0,
                    help="deliver as on time: the clock from the earliest due time, ahead "
                    "this much when nothing more is due (0: everything due at once)")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    load0 = loadavg()
    with tempfile.TemporaryDirectory(prefix="kc-delivery-cost-") as tmp:
        log = _Log(Path(tmp) / "schedule.log")
        t0 = time.process_time()
        machine, offset = build(args.records, args.delay_lo_ms, args.delay_hi_ms, log)
        built_s = time.process_time() - t0
        now = 1_000 + args.records + args.delay_hi_ms + 1
        prof = cProfile.Profile() if args.profile else None
        t0 = time.process_time()
        if prof is not None:
            prof.enable()
        moved, reads = deliver(machine, log, offset, now, args.step_ms)
        if prof is not None:
            prof.disable()
        spent_s = time.process_time() - t0
        os.close(log.fd)
    assert moved == args.records and len(machine) == 0, (moved, len(machine))
    print(f"{moved:,} records delivered ({'every ' + str(args.step_ms) + ' ms' if args.step_ms else 'all due at once'}): {spent_s / moved * 1e6:.2f} us CPU per record "
          f"({reads / moved:.2f} reads per record; applying the adds {built_s / moved * 1e6:.2f}"
          f" us per record){' under cProfile' if prof else ''}; load {load0} -> {loadavg()}")
    if prof is not None:
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
