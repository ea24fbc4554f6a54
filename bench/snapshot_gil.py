"""The longest the GIL is held at once while a schedule snapshot is built (issue 31).

A schedule partition's leader builds its snapshot (``snapshot_batches``) in a
worker thread. A C-speed pass there (``min(map(...))``, a set's
``intersection``) never gives the GIL up, and the event loop, back from a
``pread`` or a send, waits for it whole. This builds a schedule of
``--records`` pending records (``bench/delivery_cost.build``: 100 B values,
delays from ``--delay-lo-ms`` to ``--delay-hi-ms``, some promoted), then
runs ``snapshot_batches`` ``--calls`` times beside a thread that sleeps
0.5 ms at a time at the broker's switch interval. Each call's longest gap
between two wake-ups of that thread is how long the loop could have waited.
It prints them and their median (the first call also pays for a garbage
collection). ``--append`` adds the figures to bench/RESULTS.md.

    .venv/bin/python bench/snapshot_gil.py --records 110000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.compare import loadavg  # noqa: E402
from bench.delivery_cost import _Log, build  # noqa: E402
from kcompat.broker.node.server import GIL_SWITCH_INTERVAL_S  # noqa: E402
from kcompat.ext.schedule_log import snapshot_batches  # noqa: E402

TICK_S = 0.0005


def longest_gap(fn: object) -> float:
    """Seconds: the longest a thread sleeping ``TICK_S`` at a time waited
    between two wake-ups while ``fn()`` ran."""
    gaps: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            time.sleep(TICK_S)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    thread = threading.Thread(target=tick)
    thread.start()
    time.sleep(0.02)
    gaps.clear()
    fn()  # type: ignore[operator]
    stop.set()
    thread.join()
    return max(gaps, default=0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=110_000)
    ap.add_argument("--delay-lo-ms", type=int, default=100_000)
    ap.add_argument("--delay-hi-ms", type=int, default=160_000)
    ap.add_argument("--calls", type=int, default=9)
    ap.add_argument("--append", action="store_true", help="append to bench/RESULTS.md")
    args = ap.parse_args()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    with tempfile.TemporaryDirectory(prefix="kc-snapshot-gil-") as tmp:
        log = _Log(Path(tmp) / "schedule.log")
        machine, end = build(args.records, args.delay_lo_ms, args.delay_hi_ms, log)
        machine.schedule.due_targets(1_000 + args.delay_lo_ms + 5_000)  # a near future promoted
        capture = machine.capture(end)
        gaps = [longest_gap(lambda: snapshot_batches(capture, 0)) * 1000
                for _ in range(args.calls)]
    line = (f"`bench/snapshot_gil.py --records {args.records}`: longest GIL hold per snapshot "
            f"{' '.join(f'{g:.1f}' for g in gaps)} ms, median {statistics.median(gaps):.1f} ms; "
            f"load {loadavg()}")
    print(line)
    if args.append:
        with (ROOT / "bench" / "RESULTS.md").open("a") as f:
            f.write(f"\n{line}\n")


if __name__ == "__main__":
    main()
