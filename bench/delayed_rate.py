"""Delayed vs plain produce rate on one node (issue 31: delayed >= 50 % of plain).

The produce phases of ``soak.py --scenario delayed`` alone, for a quick before/after:
a fresh single kcompat broker (defaults, ``group.initial.rebalance.delay.ms=0``), two
6-partition topics; ``--records`` records of 100 B (confluent-kafka, acks=all, linger
5 ms, ``soak.produce``) without headers, then the same count with ``kc-delay-ms`` drawn
from ``--delay-lo-ms``..``--delay-hi-ms`` (about 5 % with ``kc-schedule-id``, a fifth
of those cancelled right after), ``--rounds`` times alternating. No consumer, no kill:
the rates and their ratio (medians over the rounds), the CPU per record of the broker
and of the client (this process, librdkafka's threads included: on 2 cores the two
share the machine), with the load average seen.

The rounds start once the broker logged that its codec warm-up is over (its imports
take a quarter of the GIL meanwhile). ``--profile FILE``: py-spy (if installed in the venv) samples the broker during the
delayed phases and writes a flame graph / speedscope file there. Nothing is appended to
bench/RESULTS.md: copy the figures by hand.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.compare import create_topic, loadavg, proc_cpu_s  # noqa: E402
from bench.soak import BROKER_FLAGS, PARTITIONS, produce  # noqa: E402
from compat_tests._broker import Broker  # noqa: E402

WARM_WAIT_S = 60.0
WARM_LINE = b"codec warm-up: "  # the broker's line once its codec warm-up is over


def wait_codec_warm(broker: Broker) -> None:
    """Until the broker logs that its codec warm-up is over (``WARM_WAIT_S`` at most):
    its imports take a quarter of the GIL meanwhile, which the first round measured."""
    started = time.monotonic()
    while time.monotonic() - started < WARM_WAIT_S:
        if broker.log_path.exists() and WARM_LINE in broker.log_path.read_bytes():
            print(f"codec warm-up over {time.monotonic() - started:.1f} s after the ready line",
                  flush=True)
            return
        time.sleep(0.2)
    print(f"no codec warm-up line in {WARM_WAIT_S:.0f} s: measuring anyway", flush=True)


def delayed_headers(n: int, lo_ms: int, hi_ms: int, seed: int
                    ) -> tuple[list[int], dict[int, bytes], set[int]]:
    rng = random.Random(seed)
    delays = [rng.randint(lo_ms, hi_ms) for _ in range(n)]
    ids: dict[int, bytes] = {}
    cancelled: set[int] = set()
    for i in range(n):
        if rng.random() < 0.05:
            ids[i] = b"s%d" % i
            if rng.random() < 0.2:
                cancelled.add(i)
    return delays, ids, cancelled


def headers_of(delays: list[int], ids: dict[int, bytes], i: int) -> list[tuple[str, bytes]]:
    return [("kc-delay-ms", b"%d" % delays[i])] + (
        [("kc-schedule-id", ids[i])] if i in ids else [])


def cancel_after(ids: dict[int, bytes], cancelled: set[int], i: int) -> bytes | None:
    return ids[i] if i in cancelled else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--delay-lo-ms", type=int, default=5_000)
    ap.add_argument("--delay-hi-ms", type=int, default=60_000)
    ap.add_argument("--profile", help="py-spy output file (speedscope json, .svg, or .txt: collapsed stacks)")
    ap.add_argument("--broker-set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    n = args.records
    plain_rates: list[float] = []
    delayed_rates: list[float] = []
    cpu_us: dict[str, list[float]] = {"plain": [], "delayed": []}  # broker CPU per record
    client_us: dict[str, list[float]] = {"plain": [], "delayed": []}  # this process's
    loads = [loadavg()]
    with tempfile.TemporaryDirectory(prefix="kc-delayed-rate-") as tmp:
        flags = [*BROKER_FLAGS, *(x for kv in args.broker_set for x in ("--set", kv))]
        broker = Broker(Path(tmp), extra_args=tuple(flags)).start()
        try:
            boot = broker.bootstrap
            wait_codec_warm(broker)
            for r in range(args.rounds):
                create_topic(boot, f"plain-{r}", PARTITIONS)
                create_topic(boot, f"delayed-{r}", PARTITIONS)
                assert broker.pid is not None
                cpu0, own0 = proc_cpu_s(broker.pid), time.process_time()
                res = produce(boot, f"plain-{r}", n, time.time() + 600)
                plain_rates.append(res.acked / res.seconds)
                cpu_us["plain"].append((proc_cpu_s(broker.pid) - cpu0) / n * 1e6)
                client_us["plain"].append((time.process_time() - own0) / n * 1e6)
                delays, ids, cancelled = delayed_headers(n, args.delay_lo_ms,
                                                         args.delay_hi_ms, r)
                spy = None
                if args.profile:
                    fmt = ("flamegraph" if args.profile.endswith(".svg") else
                           "raw" if args.profile.endswith(".txt") else "speedscope")
                    spy = subprocess.Popen(
                        [str(Path(sys.executable).parent / "py-spy"), "record", "-p",
                         str(broker.pid), "-o", f"{args.profile}.{r}" if r else args.profile,
                         "-f", fmt, "-r", "200", "--nonblocking", *(["--gil"] if os.environ.get("SPY_GIL") else [])],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(1.0)
                cpu0, own0 = proc_cpu_s(broker.pid), time.process_time()
                res = produce(boot, f"delayed-{r}", n, time.time() + 600,
                              headers_of=partial(headers_of, delays, ids), delays=delays,
                              cancel_after=partial(cancel_after, ids, cancelled))
                cpu_us["delayed"].append((proc_cpu_s(broker.pid) - cpu0) / n * 1e6)
                client_us["delayed"].append((time.process_time() - own0) / n * 1e6)
                if spy is not None:
                    spy.send_signal(2)
                    spy.wait(60)
                delayed_rates.append(res.acked / res.seconds)
                loads.append(loadavg())
                print(f"round {r + 1}: plain {plain_rates[-1]:,.0f} rec/s, delayed "
                      f"{delayed_rates[-1]:,.0f} rec/s ({res.failed} failed), ratio "
                      f"{delayed_rates[-1] / plain_rates[-1]:.2f}; broker CPU per record "
                      f"{cpu_us['plain'][-1]:.1f} / {cpu_us['delayed'][-1]:.1f} us, the "
                      f"client's (librdkafka's threads included) {client_us['plain'][-1]:.1f}"
                      f" / {client_us['delayed'][-1]:.1f} us; load "
                      f"{loads[-1]}",
                      flush=True)
        finally:
            broker.stop()
    plain, delayed = statistics.median(plain_rates), statistics.median(delayed_rates)
    print(f"median over {args.rounds} round(s) of {n:,} records: plain {plain:,.0f} rec/s, "
          f"delayed {delayed:,.0f} rec/s, delayed/plain {delayed / plain:.2f}; broker CPU "
          f"per record {statistics.median(cpu_us['plain']):.1f} / "
          f"{statistics.median(cpu_us['delayed']):.1f} us, the client's "
          f"{statistics.median(client_us['plain']):.1f} / "
          f"{statistics.median(client_us['delayed']):.1f} us; "
          f"load averages {' | '.join(loads)}")


if __name__ == "__main__":
    main()
