"""What one promotion turn of a large schedule costs the loop (issue 31 item 1).

The delay service's ``run`` task promotes the far slots that begin within
``PROMOTE_AHEAD_MS``, ``PROMOTE_TURN`` entries a turn at most (shared by the
schedule partitions led), in one step of the event loop; the 3-broker soak
named that step among its longest. This bench times it in this process, away
from the host's other processes: a ``Schedule`` of ``--records`` records
spread over ``--targets`` target partitions, produced in batches of 500 with
delays drawn uniformly from 5 to 60 s (as ``bench/soak.py --scenario
delayed``), then the leader's loop every ``--tick-ms`` of schedule time: one
``due_targets`` call (the promotion turn, timed), and every due record taken
out (``due``, timed: it promotes a chunk too, and ``take_all``, as a delivery
does). It prints the turns' p50 / p99 / max, the ``due`` calls' p99 and max,
and where the promotion's time went per entry:
the rows into the pending dict (its resizes included), the due keys, their
grouping by target, their sort, and their merge into the target's runs.

    .venv/bin/python bench/schedule_promote.py --records 1000000

Figures only; nothing is appended to bench/RESULTS.md (copy them by hand).
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import lshift, or_
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kcompat.broker.ext.delays import DELIVERY_BATCH, PROMOTE_TURN  # noqa: E402
from kcompat.ext import schedule as sched  # noqa: E402

PARTS = ("rows", "keys", "group", "sort", "merge")


def timed_near_rows(spent: dict[str, float]) -> Callable[..., None]:
    """``Schedule._near_rows`` step by step, each part's time added to ``spent``
    (the same operations, in the same order)."""

    def near_rows(self: Any, entries: Sequence[int], dues: Sequence[int],
                  tids: Sequence[int], offsets: Sequence[int], wheres: Sequence[int],
                  named: Any = ()) -> None:
        if not entries:
            return
        t0 = time.perf_counter()
        self._pending.update(zip(entries, map(sched.ROW.pack, entries, dues, tids, offsets,
                                              wheres), strict=True))
        self._near_ids.update(named)
        t1 = time.perf_counter()
        keys = list(map(or_, map(lshift, dues, repeat(sched.KEY_SHIFT)), entries))
        t2 = time.perf_counter()
        by_tid: dict[int, list[int]] = {}
        if min(tids) == max(tids):
            by_tid[tids[0]] = keys
        else:
            for tid, key in zip(tids, keys, strict=True):
                by_tid.setdefault(tid, []).append(key)
        t3 = time.perf_counter()
        for run in by_tid.values():
            run.sort()
        t4 = time.perf_counter()
        for tid, run in by_tid.items():
            self._near.add(self._targets[tid], run)
        t5 = time.perf_counter()
        for part, took in zip(PARTS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4),
                              strict=True):
            spent[part] += took

    return near_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--targets", type=int, default=6)
    ap.add_argument("--turn", type=int, default=PROMOTE_TURN, help="entries per promotion turn")
    ap.add_argument("--tick-ms", type=int, default=20)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    spent = dict.fromkeys(PARTS, 0.0)
    sched.Schedule._near_rows = timed_near_rows(spent)  # type: ignore[method-assign]
    rng = random.Random(args.seed)
    schedule = sched.Schedule()
    t0 = 1_700_000_000_000
    for entry in range(0, args.records, 500):
        n = min(500, args.records - entry)
        schedule.add_run(entry, [t0 + rng.randint(5_000, 60_000) for _ in range(n)],
                         ("t", rng.randrange(args.targets)), list(range(entry, entry + n)),
                         [-1] * n, {})
    gc.collect()
    gc.freeze()  # the schedule built: the collector's walks are not the bench's subject
    turns: list[float] = []
    deliveries: list[float] = []  # ``due`` of one target, as a delivery task asks
    delivered = 0
    now = t0
    cpu = time.process_time()
    while delivered < args.records:
        started = time.perf_counter()
        schedule.due_targets(now, args.turn, 0)
        turns.append(time.perf_counter() - started)
        for target in [t for t in schedule._near_due() if t is not None]:
            started = time.perf_counter()
            due = schedule.due(now, DELIVERY_BATCH, target)  # it promotes a chunk too
            deliveries.append(time.perf_counter() - started)
            if due:
                schedule.take_all([p.entry for p in due], [p.due_ms for p in due])
                delivered += len(due)
        now += args.tick_ms
    cpu = time.process_time() - cpu
    turns.sort()

    def ms(x: float) -> str:
        return f"{x * 1e3:.1f} ms"

    deliveries.sort()
    busy = [t for t in turns if t > 1e-3]
    print(f"{args.records:,} records, {args.targets} targets, turns of {args.turn:,} entries "
          f"every {args.tick_ms} ms of schedule time; Python {sys.version.split()[0]}")
    print(f"promotion turns: {len(turns):,} ({len(busy):,} over 1 ms); over 1 ms: p50 "
          f"{ms(busy[len(busy) // 2]) if busy else '-'}, p99 "
          f"{ms(busy[int(len(busy) * 0.99)]) if busy else '-'}; max {ms(turns[-1])}; "
          f"the five longest {', '.join(ms(t) for t in turns[-5:])}")
    print(f"a delivery's due call: {len(deliveries):,}, p99 "
          f"{ms(deliveries[int(len(deliveries) * 0.99)])}, max {ms(deliveries[-1])}")
    total = sum(spent.values())
    print(f"promotion per entry: {total / args.records * 1e6:.2f} us ("
          + ", ".join(f"{p} {spent[p] / args.records * 1e6:.2f}" for p in PARTS)
          + f"); the whole run's CPU {cpu:.1f} s")


if __name__ == "__main__":
    main()
