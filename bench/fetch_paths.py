"""Consume through kcompat's two Fetch paths: records copied vs sent with sendfile.

Not a test: it prints a table and appends it to bench/RESULTS.md.

    .venv/bin/python bench/fetch_paths.py                      # 1,000,000 x 1 KiB, 2 rounds
    .venv/bin/python bench/fetch_paths.py --records 300000 --rounds 1

One kcompat broker (bench/compare.py's flags: ``kcompat.flush.mode=never``...)
gets ``--records`` 1 KiB records in a topic of 1 partition and in one of 6
(Kafka's ProducerPerformance, ``batch.size=65536 linger.ms=5``, acks=1). Then,
round after round, it is restarted on the same data with
``kcompat.fetch.sendfile=false`` (every record set read into Python bytes and
written to the socket) and with ``true`` (segment ranges of 16 KiB or more sent
with ``os.sendfile``), and Kafka's ConsumerPerformance (a separate JVM, the
client bench/compare.py uses) reads each topic from the earliest offset: one
pass not counted (the page cache and the broker's lazy imports are warm after
it), then ``--passes`` measured ones. The figures: fetch MiB/s
(ConsumerPerformance's ``fetch.MB.sec``, the join not counted) and broker CPU
seconds (/proc utime+stime over the measured passes) per GiB of record values
consumed. The machine's load average is printed with each row: the 2 cores are
shared with other work, so compare rows of the same run.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from compare import (  # noqa: E402
    KCOMPAT_ARGS,
    consumer_perf,
    create_topic,
    loadavg,
    machine,
    proc_cpu_s,
    producer_perf,
)

from compat_tests._broker import Broker, unique_topic  # noqa: E402

MODES = {"copy": "false", "sendfile": "true"}


def _restart(broker: Broker, sendfile: str) -> None:
    args = [a for a in broker.extra_args if not a.startswith("kcompat.fetch.sendfile=")]
    if args and args[-1] == "--set":
        args.pop()
    broker.extra_args = (*args, "--set", f"kcompat.fetch.sendfile={sendfile}")
    broker.restart()


def _measure(broker: Broker, topic: str, n: int, passes: int) -> dict[str, float]:
    consumer_perf(broker.bootstrap, topic, n)  # warm-up pass, not counted
    assert broker.pid is not None
    cpu0 = proc_cpu_s(broker.pid)
    runs = [consumer_perf(broker.bootstrap, topic, n) for _ in range(passes)]
    cpu = proc_cpu_s(broker.pid) - cpu0
    gib = sum(r["gib"] for r in runs)
    secs = sum(r["secs"] for r in runs)
    return {"mib_s": gib * 1024 / secs, "cpu_per_gib": cpu / gib, "cpu_s": cpu, "gib": gib}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "RESULTS.md")
    ap.add_argument("--no-results", action="store_true")
    args = ap.parse_args()
    broker = Broker(Path(tempfile.mkdtemp(prefix="kcompat-fetch-paths-")),
                    extra_args=KCOMPAT_ARGS)
    broker.start()
    rows: list[tuple[str, str, dict[str, float], str]] = []
    try:
        topics = {}
        for partitions in (1, 6):
            topic = unique_topic(f"fetch-paths-{partitions}p")
            create_topic(broker.bootstrap, topic, partitions)
            producer_perf(broker.bootstrap, topic, args.records, "1")
            topics[f"{partitions}p"] = topic
        for _round in range(args.rounds):
            for mode, value in MODES.items():
                _restart(broker, value)
                for name, topic in topics.items():
                    fig = _measure(broker, topic, args.records, args.passes)
                    load = loadavg()
                    rows.append((mode, name, fig, load))
                    print(f"{mode:8} {name}: {fig['mib_s']:7.1f} MiB/s  "
                          f"{fig['cpu_per_gib']:5.2f} broker CPU-s/GiB  (load {load})",
                          flush=True)
    finally:
        broker.close()
    lines = [f"{'path':8} {'topic':5} {'fetch MiB/s':>11} {'CPU-s/GiB':>9}  rounds (MiB/s)"]
    for mode in MODES:
        for name in ("1p", "6p"):
            figs = [f for m, n, f, _l in rows if m == mode and n == name]
            lines.append(f"{mode:8} {name:5} {statistics.median(f['mib_s'] for f in figs):11.1f} "
                         f"{statistics.median(f['cpu_per_gib'] for f in figs):9.2f}  "
                         + " ".join(f"{f['mib_s']:.0f}" for f in figs))
    print("\n".join(lines))
    if args.no_results:
        return
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    loads = ", ".join(sorted({load for *_rest, load in rows}))
    with open(args.results, "a") as f:
        f.write(f"\n## bench/fetch_paths.py — {stamp}\n\n")
        f.write("\n".join(machine()) + "\n")
        f.write(f"Command: `{' '.join(sys.argv)}`; {args.records} x 1 KiB per topic, "
                f"{args.passes} measured passes per row, medians of {args.rounds} rounds; "
                f"load averages seen: {loads}.\n\n```\n" + "\n".join(lines) + "\n```\n")


if __name__ == "__main__":
    main()
