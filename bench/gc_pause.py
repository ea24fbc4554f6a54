"""What one full garbage collection costs a schedule with many promoted records (issue 31).

The soaks at 1M delayed records see one full collection (generation 2) a run,
of 60-80 ms: a step of the event loop over the 50 ms target. This bench builds,
in this process, a ``Schedule`` (``kcompat.ext.schedule``) of ``--records``
records due within a minute, in batches of 2,000 records of 6 targets (~5 %
with a schedule id), freezes what existed before (the broker freezes its start),
and times a full collection with the records far (compact arrays), then with
all of them promoted (a row tuple each in ``_pending``, a key each in the near
runs), then after one more promoted row (the dict tracked again); and, for
scale, the same number of row tuples in a dict and of ints in a list.

    .venv/bin/python bench/gc_pause.py --records 1000000

Figures only; nothing is appended to bench/RESULTS.md (copy them by hand).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kcompat.ext.schedule import Schedule  # noqa: E402

BATCH = 2_000
NOW_MS = 1_800_000_000_000


def full_gc_ms() -> float:
    started = time.perf_counter()
    gc.collect()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    args = ap.parse_args()
    rng = random.Random(1)
    gc.collect()
    gc.freeze()
    schedule, entry = Schedule(), 0
    while entry < args.records:
        dues = [NOW_MS + rng.randint(5_000, 60_000) for _ in range(BATCH)]
        ids = {i: f"id{entry + i}" for i in range(BATCH) if rng.random() < 0.05}
        schedule.add_run(entry, dues, (f"t{entry % 6}", entry % 6),
                         list(range(entry, entry + BATCH)), [-1] * BATCH, ids)
        entry += BATCH
    gc.collect()
    print(f"{entry:,} records far: full collection {full_gc_ms():.1f} ms "
          f"({len(gc.get_objects()):,} tracked objects)")
    while not schedule.promote(NOW_MS + 61_000, limit=100_000):
        pass
    gc.collect()
    print(f"all promoted: full collection {full_gc_ms():.1f} ms "
          f"({len(gc.get_objects()):,} tracked objects; the pending dict tracked: "
          f"{gc.is_tracked(schedule._pending)})")
    row = next(iter(schedule._pending.values()))
    # a fresh row (a tuple is tracked until a collection examines it)
    schedule._pending[-1] = (bytes(bytearray(row)) if isinstance(row, bytes)
                             else tuple(list(row)))
    print(f"after one more promoted row: full collection {full_gc_ms():.1f} ms")
    del schedule
    gc.collect()
    target = tuple(["t", 1])
    rows = {i: (i, i, None, target, i, -1) for i in range(entry)}
    gc.collect()
    rows[-1] = (-1, -1, None, target, -1, -1)
    print(f"a dict of {entry:,} row tuples (tracked again by an insert): "
          f"{full_gc_ms():.1f} ms")
    del rows
    numbers = list(range(entry))
    print(f"a list of {entry:,} ints: {full_gc_ms():.1f} ms")
    del numbers
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
