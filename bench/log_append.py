"""The partition log alone: appends and reads through the file store, no broker.

Prints the best and median of ``--repeats`` runs of ``--appends`` appends of one
16 x 1 KiB batch plus a read of every 8th batch, on the real disk (a temporary
directory). Compare two trees with ``PYTHONPATH=<tree> .venv/bin/python
bench/log_append.py`` run alternately; figures go to bench/RESULTS.md by hand.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import kcompat
from kcompat.log import LogConfig, PartitionLog
from kcompat.wire.batch import parse_header
from kcompat.wire.records import encode_batch

TIMESTAMP = 1_790_000_000_000


def run_once(appends: int) -> float:
    raw = encode_batch([(None, b"x" * 1024, (), TIMESTAMP) for _ in range(16)])
    view = memoryview(raw).toreadonly()
    header = parse_header(view)
    directory = Path(tempfile.mkdtemp(prefix="kcompat-log-bench-"))
    try:
        log = PartitionLog.open(directory / "t-0", LogConfig(segment_bytes=64 << 20), 0)
        start = time.perf_counter()
        for _ in range(appends):
            log.append(view, header, 0, TIMESTAMP)
        for offset in range(0, log.log_end_offset, 16 * 8):
            log.read(offset, 1 << 16, log.log_end_offset)
        elapsed = time.perf_counter() - start
        log.close()
        return elapsed
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--appends", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    runs = [run_once(args.appends) for _ in range(args.repeats)]
    print(f"{kcompat.__file__}: {args.appends} appends + reads: best {min(runs):.3f} s, "
          f"median {statistics.median(runs):.3f} s")


if __name__ == "__main__":
    main()
