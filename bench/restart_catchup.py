"""A restart while delayed records come due: how soon delivery is on time again (issue 31).

``bench/schedule_restart.py`` restarts a broker whose backlog is due an hour later;
here records come due all the time, as in the soak's kill -9. One kcompat broker
(``soak.BROKER_FLAGS``) takes ``--records`` delayed records (100 B, confluent-kafka,
``soak.produce``; ``kc-delay-ms`` from ``--delay-lo-ms``..``--delay-hi-ms``, 5 % with a
``kc-schedule-id``) to one 6-partition topic. ``--kill-after`` seconds after the
produce ends it is killed (kill -9) and started again on the same data. Then its
``/metrics`` is read every ``EVERY_S``: ``kcompat_delayed_records_pending`` (0 until
the schedule partitions are loaded) and ``kcompat_delayed_delivery_overdue_seconds``
(how long the earliest pending record has been due, at the worst schedule partition).

It prints, in seconds after the new start: the ready line; the schedule loaded (the
first reading with records pending); the worst overdue then; and caught up — the
first reading after the load from which the overdue stays under ``ON_TIME_S`` for
``CALM_S``. Records that came due while the broker was down are late by the downtime
whatever happens; what follows the load is the catch-up, which the soak's lateness
of records due after the restart measures. ``--no-results``: print only.

    .venv/bin/python bench/restart_catchup.py --records 1000000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.compare import create_topic, loadavg, publish  # noqa: E402
from bench.delayed_rate import delayed_headers, headers_of  # noqa: E402
from bench.soak import (  # noqa: E402
    BROKER_FLAGS,
    PARTITIONS,
    machine_line,
    metric_sum,
    produce,
    scrape,
    tree_line,
)
from compat_tests._broker import Broker, free_port  # noqa: E402

EVERY_S = 0.5
ON_TIME_S = 0.5  # overdue under this counts as on time (backpressure's own bound)
CALM_S = 2.0
PENDING = "kcompat_delayed_records_pending"
OVERDUE = "kcompat_delayed_delivery_overdue_seconds"


def overdue_max(metrics: dict[str, float]) -> float:
    return max((v for k, v in metrics.items() if k.startswith(OVERDUE + "{")), default=0.0)


def watch(port: int, t0: float, until_s: float) -> list[tuple[float, float, float]]:
    """(seconds after ``t0``, pending, worst overdue) every ``EVERY_S`` until ``until_s``."""
    seen = []
    while time.monotonic() - t0 < until_s:
        m = scrape(port)
        if m:
            seen.append((time.monotonic() - t0, metric_sum(m, PENDING) or 0.0, overdue_max(m)))
        time.sleep(EVERY_S)
    return seen


def caught_up(seen: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """(loaded at, worst overdue from then on, on time again at; nan if never)."""
    nan = float("nan")
    loaded = next((i for i, (_t, pending, _o) in enumerate(seen) if pending > 0), None)
    if loaded is None:
        return nan, nan, nan
    after = seen[loaded:]
    worst = max(o for _t, _p, o in after)
    for i, (t, _p, o) in enumerate(after):
        if o < ON_TIME_S and all(later < ON_TIME_S for s, _p, later in after[i:]
                                 if s - t <= CALM_S) and after[-1][0] - t >= CALM_S:
            return after[0][0], worst, t
    return after[0][0], worst, nan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--delay-lo-ms", type=int, default=5_000)
    ap.add_argument("--delay-hi-ms", type=int, default=60_000)
    ap.add_argument("--kill-after", type=float, default=5.0)
    ap.add_argument("--watch", type=float, default=30.0, help="seconds after the restart")
    ap.add_argument("--no-results", action="store_true")
    args = ap.parse_args()
    n = args.records
    with tempfile.TemporaryDirectory(prefix="kc-restart-catchup-") as tmp:
        port = free_port()
        broker = Broker(Path(tmp), extra_args=(*BROKER_FLAGS, "--set", f"admin.port={port}"))
        broker.start()
        try:
            create_topic(broker.bootstrap, "catchup", PARTITIONS)
            delays, ids, _cancelled = delayed_headers(n, args.delay_lo_ms, args.delay_hi_ms, 1)
            t_produce = time.time()
            res = produce(broker.bootstrap, "catchup", n, t_produce + 600,
                          headers_of=partial(headers_of, delays, ids), delays=delays)
            time.sleep(args.kill_after)
            pending_then = metric_sum(scrape(port), PENDING) or 0.0
            broker.kill()
            t0 = time.monotonic()
            broker.start(timeout=120)
            ready = time.monotonic() - t0
            seen = watch(port, t0, args.watch)
        finally:
            broker.close()
    loaded, worst, on_time = caught_up(seen)
    lines = [
        f"\n## Restart while delayed records come due (bench/restart_catchup.py) — "
        f"{time.strftime('%Y-%m-%d %H:%M')} UTC\n",
        f"`bench/restart_catchup.py --records {n} --delay-lo-ms {args.delay_lo_ms} "
        f"--delay-hi-ms {args.delay_hi_ms} --kill-after {args.kill_after:g}`; {tree_line()}; "
        f"{machine_line()}; "
        f"load {loadavg()} at the end.\n",
        f"* delayed produce {res.acked / res.seconds:,.0f} rec/s; kill -9 "
        f"{args.kill_after:g} s after it, {pending_then:,.0f} pending",
        f"* after the new start: ready {ready:.1f} s, schedule loaded {loaded:.1f} s "
        f"(worst overdue then {worst:.1f} s), on time again (overdue < {ON_TIME_S} s for "
        f"{CALM_S:g} s) {on_time:.1f} s: a catch-up of {on_time - loaded:.1f} s",
    ]
    publish(lines, append=not args.no_results)


if __name__ == "__main__":
    main()
