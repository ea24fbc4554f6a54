"""What a log read's look-ups cost on the loop thread, alone and beside a busy thread.

A Fetch (and a Raft leader answering a follower) reads each partition from
the batch holding its fetch offset: the look-up goes from the offset index's
entry at or below it to that batch (``LogSegment.batch_of``), and again to
the high watermark's batch when the read is bounded below the log end. This
builds one log of ``--batches`` one-record batches of 100 B (the size of a
delivery's or a small producer's batches), then times ``--reads`` reads at
random offsets, each bounded a few batches further on, at the broker's GIL
switch interval: alone, and beside a thread running Python, where each
system call of the loop thread gives the GIL up and waits to take it back.
Prints the figures and the load average; ``--append`` adds them to
bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402

from bench.gil_convoy import burn, report  # noqa: E402
from kcompat.broker.node.server import GIL_SWITCH_INTERVAL_S  # noqa: E402
from kcompat.log import LogConfig, PartitionLog  # noqa: E402
from kcompat.wire.batch import validate  # noqa: E402


def _build(directory: Path, batches: int) -> PartitionLog:
    log = PartitionLog.open(directory / "t-0", LogConfig(), 0)
    for i in range(batches):
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0,
                                            producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                            batch_size=1 << 20)
        builder.append(0, 1_000 + i, None, b"x" * 100, [])
        data = bytes(builder.build())
        log.append(memoryview(data), validate(data), 0, 0)
    return log


def _reads(log: PartitionLog, offsets: list[int]) -> list[float]:
    took = []
    for offset in offsets:
        started = time.perf_counter()
        log.read(offset, 1, offset + 5)
        took.append(time.perf_counter() - started)
    return took


def measure(batches: int, reads: int) -> tuple[list[float], list[float]]:
    """Each read's time, alone and beside a busy thread."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    rng = random.Random(1)
    offsets = [rng.randrange(batches - 10) for _ in range(reads)]
    with tempfile.TemporaryDirectory() as tmp:
        log = _build(Path(tmp), batches)
        try:
            alone = _reads(log, offsets)
            stop = threading.Event()
            busy = threading.Thread(target=burn, args=(stop,))
            busy.start()
            try:
                time.sleep(0.05)
                beside = _reads(log, offsets)
            finally:
                stop.set()
                busy.join()
        finally:
            log.close()
            sys.setswitchinterval(before)
    return alone, beside


def _figures(took: list[float]) -> str:
    ordered = sorted(took)
    return (f"{statistics.mean(took) * 1e6:.0f} / {ordered[int(len(ordered) * 0.99)] * 1e6:.0f} "
            f"/ {ordered[-1] * 1e6:.0f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20_000)
    parser.add_argument("--reads", type=int, default=3_000)
    parser.add_argument("--append", action="store_true", help="append to bench/RESULTS.md")
    args = parser.parse_args()
    load_before = os.getloadavg()
    alone, beside = measure(args.batches, args.reads)
    load_after = os.getloadavg()
    lines = [
        f"## Log look-ups of a read, alone and beside a busy thread — "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC", "",
        f"`bench/log_lookup.py --batches {args.batches} --reads {args.reads}`; Python "
        f"{sys.version.split()[0]}, {os.cpu_count()} cores, switch interval "
        f"{GIL_SWITCH_INTERVAL_S * 1000:g} ms; load average before "
        f"{' '.join(f'{x:.2f}' for x in load_before)}, after "
        f"{' '.join(f'{x:.2f}' for x in load_after)}", "",
        "| a read of one 100 B batch, bounded 5 batches on | mean / p99 / max |",
        "|---|---|",
        f"| alone | {_figures(alone)} |",
        f"| beside a thread running Python | {_figures(beside)} |", ""]
    report(lines, args.append)


if __name__ == "__main__":
    main()
