"""Delayed delivery's broker CPU per delivered record, on a real broker (issue 31).

``bench/delivery_cost.py`` measures the delivery loop in process, without Raft, the
target's append or fsync. This one runs a single kcompat broker (``soak.BROKER_FLAGS``)
and produces ``--records`` delayed records (100 B, confluent-kafka, ``soak.produce``) to
one 6-partition topic with ``kc-delay-ms`` drawn from ``--delay-lo-ms``..``--delay-hi-ms``.
The low end must leave the produce over before anything is due. Nothing else runs: no
consumer, no probe. It prints the broker's CPU per produced record, then its CPU from
the first due time until it is idle again. The idle rate, measured just before, is
taken off, and the rest is divided by the records delivered.

The spread of the delays sets the due rate, and so the size of each delivery batch: a
spread of 100 ms is a backlog (batches of ``DELIVERY_BATCH``); a spread of 30 s is
records on time, a few dozen per target per ``DELIVERY_LINGER_MS``. Nothing is appended
to bench/RESULTS.md: copy the figures by hand.
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

from bench.compare import create_topic, loadavg, proc_cpu_s  # noqa: E402
from bench.delayed_rate import delayed_headers, headers_of  # noqa: E402
from bench.soak import BROKER_FLAGS, PARTITIONS, produce  # noqa: E402
from compat_tests._broker import Broker  # noqa: E402

IDLE_S = 2.0  # the broker's idle CPU rate is measured this long, before the first due time
SETTLED = 0.05  # CPU s/s above idle under which the broker counts as idle again


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--delay-lo-ms", type=int, default=15_000)
    ap.add_argument("--delay-hi-ms", type=int, default=45_000)
    args = ap.parse_args()
    n, lo_s, hi_s = args.records, args.delay_lo_ms / 1000, args.delay_hi_ms / 1000
    with tempfile.TemporaryDirectory(prefix="kc-delivery-live-") as tmp:
        broker = Broker(Path(tmp), extra_args=tuple(BROKER_FLAGS)).start()
        try:
            assert broker.pid is not None
            create_topic(broker.bootstrap, "delivered", PARTITIONS)
            delays, ids, _cancelled = delayed_headers(n, args.delay_lo_ms, args.delay_hi_ms, 1)
            cpu0, t0 = proc_cpu_s(broker.pid), time.time()
            res = produce(broker.bootstrap, "delivered", n, t0 + 600,
                          headers_of=partial(headers_of, delays, ids), delays=delays)
            cpu1, t1 = proc_cpu_s(broker.pid), time.time()
            print(f"produce: {res.acked / res.seconds:,.0f} rec/s, broker CPU "
                  f"{(cpu1 - cpu0) / n * 1e6:.1f} us per record; over {t1 - t0:.1f} s after "
                  f"the start (the first record is due {lo_s:.1f} s after its send)", flush=True)
            if t1 - t0 + IDLE_S > lo_s:
                sys.exit("the produce ran into the first due time: raise --delay-lo-ms")
            time.sleep(max(0.0, t0 + lo_s - IDLE_S - 0.5 - time.time()))
            i0 = proc_cpu_s(broker.pid)
            time.sleep(IDLE_S)
            idle = (proc_cpu_s(broker.pid) - i0) / IDLE_S
            d0, s0 = proc_cpu_s(broker.pid), time.time()
            time.sleep(max(0.0, t1 + hi_s + 3 - time.time()))
            last = proc_cpu_s(broker.pid)
            while True:  # until a second passes at about the idle rate
                time.sleep(1.0)
                now = proc_cpu_s(broker.pid)
                if now - last < idle + SETTLED:
                    break
                last = now
            s1 = time.time()
            busy = (last - d0) - idle * (s1 - s0)
            print(f"delivery: {s1 - s0:.1f} s from the first due time to idle, broker CPU "
                  f"{last - d0:.1f} s (idle {idle:.3f} CPU s/s taken off): "
                  f"{busy / n * 1e6:.1f} us per delivered record; delays "
                  f"{args.delay_lo_ms}..{args.delay_hi_ms} ms; load {loadavg()}", flush=True)
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
