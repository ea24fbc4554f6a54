"""What applying a delivery's ``out`` record costs a schedule replica, per record (issue 31).

A schedule partition's leader promotes records near their due time (rows in a
dict) and takes a delivery's records out of its index with dict pops; a
follower never promotes, so ``Schedule.take_all`` finds each delivered entry
in its far slot. At RF 3 every broker follows two thirds of the schedule
partitions: this is work on every broker for every delivered record.

This bench builds, in this process, a ``Schedule`` of ``--records`` records of
one target, produced in batches of 1,000 with delays drawn uniformly from 5 to
60 s (as ``bench/soak.py --scenario delayed``), and takes them all out in due
order, ``--chunk`` entries per ``out`` record: as a follower does (every entry
far) and as the leader does (promote up to the record's last due time, then
take). CPU time of this process per record, best of ``--rounds``.

    .venv/bin/python bench/schedule_take.py --records 200000

Figures only; nothing is appended to bench/RESULTS.md (copy them by hand).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kcompat.ext.schedule import Schedule  # noqa: E402

BATCH = 1_000
NOW_MS = 1_800_000_000_000
TARGET = ("soak-delayed", 0)

Outs = list[tuple[list[int], list[int]]]


def build(dues: list[int]) -> Schedule:
    schedule = Schedule()
    for first in range(0, len(dues), BATCH):
        run = dues[first:first + BATCH]
        entries = list(range(first, first + len(run)))
        schedule.add_run(first, run, TARGET, entries, [-1] * len(run), {})
    return schedule


def as_follower(schedule: Schedule, outs: Outs) -> int:
    return sum(len(schedule.take_all(entries, dues)) for entries, dues in outs)


def as_leader(schedule: Schedule, outs: Outs) -> int:
    taken = 0
    for entries, dues in outs:
        schedule.promote(dues[-1], limit=None)
        taken += len(schedule.take_all(entries, dues))
    return taken


def per_record_us(way: Callable[[Schedule, Outs], int], dues: list[int], outs: Outs) -> float:
    schedule = build(dues)
    started = time.process_time()
    taken = way(schedule, outs)
    took = time.process_time() - started
    if taken != len(dues) or len(schedule):
        raise SystemExit(f"took {taken} of {len(dues)}, {len(schedule)} left")
    return took / len(dues) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--chunk", type=int, default=500, help="entries per out record")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(1)
    dues = [NOW_MS + rng.randint(5_000, 60_000) for _ in range(args.records)]
    order = sorted(range(args.records), key=lambda e: (dues[e], e))
    outs = [(order[i:i + args.chunk], [dues[e] for e in order[i:i + args.chunk]])
            for i in range(0, args.records, args.chunk)]
    print(f"{args.records} records, delays 5-60 s, {args.chunk} per out record; "
          f"CPU us per record, best of {args.rounds}")
    for name, way in (("follower (far take_all)", as_follower),
                      ("leader (promote, then take_all)", as_leader)):
        runs = [per_record_us(way, dues, outs) for _ in range(args.rounds)]
        print(f"  {name:34} {min(runs):6.2f}   ({', '.join(f'{r:.2f}' for r in runs)})")


if __name__ == "__main__":
    main()
