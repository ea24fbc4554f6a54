"""``make demo``: the order pipeline end to end against an embedded kcompat broker.

1. start a single-node kcompat broker (``compat_tests._broker.Broker``) on a free port;
2. phase 1: generate orders for minutes 0-9, run the streaming jobs (availableNow);
3. phase 2 (restart from the checkpoints): orders for minutes 10-19 plus three late
   orders for minute 2 (behind the watermark: dropped) and a far-ahead flush event;
   run the jobs again;
4. check every window was emitted exactly once, to the Kafka topic and to Parquet,
   with the expected counts and revenue; run the two batch jobs (offset range,
   startingTimestamp) and check them against what the producer acknowledged;
5. write transactions (committed, aborted, one left open) to another topic and read it
   in batch with kafka.isolation.level read_committed (committed records only, up to the
   last stable offset) and read_uncommitted (aborted and open ones too).

Prints a summary; ``--results FILE`` writes everything as JSON (compat_tests/spark reads it).
Exit code 0 only if every check passed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from compat_tests._broker import Broker
from spark_demo import pipeline as P


def _read_topic(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                      consumer_timeout_ms=3000)
    parts = c.partitions_for_topic(topic) or set()
    tps = [TopicPartition(topic, p) for p in sorted(parts)]
    c.assign(tps)
    ends = c.end_offsets(tps)
    out = []
    for rec in c:
        out.append({"key": rec.key.decode(), "value": json.loads(rec.value),
                    "headers": {k: v.decode() for k, v in rec.headers}})
        if all(c.position(tp) >= ends[tp] for tp in tps):
            break
    c.close()
    return out


def _create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()])
    finally:
        admin.close()


TXN_TOPIC = "payments-txn"
TXN_OUTCOMES = ["commit", "abort", "commit", "abort", "commit", "open"]
TXN_PER_PARTITION = 25


def _isolation_reads(spark: Any, bootstrap: str) -> dict[str, Any]:
    _create_topics(bootstrap, {TXN_TOPIC: 2})
    producer = P.write_transactions(bootstrap, TXN_TOPIC, 2, TXN_OUTCOMES, TXN_PER_PARTITION,
                                    transactional_id="kcompat-spark-demo-txn")
    levels = ("read_committed", "read_uncommitted")
    while_open = {lvl: P.batch_by_isolation(spark, bootstrap, TXN_TOPIC, lvl) for lvl in levels}
    producer.abort_transaction(30)  # the open transaction: aborted too
    after_abort = {lvl: P.batch_by_isolation(spark, bootstrap, TXN_TOPIC, lvl) for lvl in levels}

    def values(outcomes: set[str]) -> list[str]:
        return sorted(f"t{n}-p{p}-{i}" for n, o in enumerate(TXN_OUTCOMES, start=1)
                      if o in outcomes for p in range(2) for i in range(TXN_PER_PARTITION))

    def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {"values": sorted(r["value"] for r in rows),
                "max_offset": {str(p): max((r["offset"] for r in rows if r["partition"] == p),
                                           default=-1) for p in range(2)}}

    return {
        "outcomes": TXN_OUTCOMES,
        "expected_committed": values({"commit"}),
        "expected_all": values({"commit", "abort", "open"}),
        "while_open": {lvl: summary(rows) for lvl, rows in while_open.items()},
        "after_abort": {lvl: summary(rows) for lvl, rows in after_abort.items()},
    }


def run(work: Path) -> dict[str, Any]:
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    broker = Broker(work / "broker")
    broker.start()
    try:
        bootstrap = broker.bootstrap
        topic, out_topic = "orders-v1", "order-windows"
        _create_topics(bootstrap, {topic: 3, out_topic: 2})
        now = int(time.time() * 1000)
        start = (now - 50 * 60_000) // 60_000 * 60_000
        phase1 = P.make_orders(start, range(0, 10), per_minute=60, seed=1)
        phase2 = P.make_orders(start, range(10, 20), per_minute=60, seed=2)
        late = [P.Order(f"late-{i}", "c1", "eu", 1000 + i, start + 2 * 60_000 + 1000 * i)
                for i in range(3)]
        flush = [P.Order("flush", "c0", "eu", 1, start + 30 * 60_000)]

        t = time.monotonic()
        spark = P.spark_session()
        spark.sparkContext.setLogLevel("ERROR")
        timings["spark_start_s"] = time.monotonic() - t

        acks1 = P.generate_orders(bootstrap, topic, phase1)
        t = time.monotonic()
        progress1 = P.run_aggregation(spark, bootstrap, topic, out_topic, work)
        timings["stream_run1_s"] = time.monotonic() - t
        kafka_after1 = _read_topic(bootstrap, out_topic)
        parquet_after1 = P.read_parquet_windows(spark, work)

        acks2 = P.generate_orders(bootstrap, topic, phase2 + late + flush)
        t = time.monotonic()
        progress2 = P.run_aggregation(spark, bootstrap, topic, out_topic, work)
        timings["stream_run2_s"] = time.monotonic() - t
        kafka_rows = _read_topic(bootstrap, out_topic)
        parquet_rows = P.read_parquet_windows(spark, work)

        # Expected: every window strictly before the flush event's watermark is closed.
        all_orders = phase1 + phase2 + late + flush
        expected = P.expected_windows(all_orders, dropped_late={o.order_id for o in late})
        expected = {k: v for k, v in expected.items()
                    if int(k.split("|")[0]) < start + 28 * 60_000}

        # Batch job 1: a bounded offset range per partition.
        acks = acks1 + acks2
        ends = Counter(p for p, _, _ in acks)
        starting = {"0": 10, "1": 0, "2": 5}
        ending = {"0": 40, "1": -1, "2": 25}
        t = time.monotonic()
        by_offsets = P.batch_by_offsets(spark, bootstrap, topic, starting, ending)
        expected_offsets = sorted(
            (p, o) for p, o, _ in acks
            if o >= starting[str(p)] and (ending[str(p)] == -1 or o < ending[str(p)]))
        # Batch job 2: everything at or after an event time (ListOffsets by timestamp).
        ts = start + 15 * 60_000 + 30_000
        by_ts = P.batch_by_timestamp(spark, bootstrap, topic, ts)
        # Kafka semantics: from the first offset whose timestamp >= ts, per partition.
        first = {}
        for p, o, stamp in sorted(acks, key=lambda a: (a[0], a[1])):
            if stamp >= ts and p not in first:
                first[p] = o
        expected_ts = sorted((p, o) for p, o, _ in acks if p in first and o >= first[p])
        timings["batch_jobs_s"] = time.monotonic() - t

        # Batch job 3: transactions (committed, aborted, one still open) read with
        # kafka.isolation.level read_committed and read_uncommitted.
        t = time.monotonic()
        isolation = _isolation_reads(spark, bootstrap)
        timings["isolation_s"] = time.monotonic() - t
        spark.stop()
    finally:
        broker.close()
    timings["total_s"] = time.monotonic() - t0

    kafka_keys = [r["key"] for r in kafka_rows]
    parquet_keys = [f"{r['window_start_ms']}|{r['region']}" for r in parquet_rows]
    return {
        "window_start_ms": start,
        "produced": {"phase1": len(acks1), "phase2": len(acks2), "per_partition": dict(ends)},
        "progress": {"run1": progress1, "run2": progress2},
        "expected_windows": expected,
        "kafka_windows_after_run1": len(kafka_after1),
        "parquet_windows_after_run1": len(parquet_after1),
        "kafka_windows": {r["key"]: {"orders": r["value"]["orders"],
                                     "revenue_cents": r["value"]["revenue_cents"]}
                          for r in kafka_rows},
        "kafka_duplicate_keys": sorted(k for k, n in Counter(kafka_keys).items() if n > 1),
        "kafka_headers": sorted({json.dumps(r["headers"]) for r in kafka_rows}),
        "parquet_windows": {f"{r['window_start_ms']}|{r['region']}":
                            {"orders": r["orders"], "revenue_cents": r["revenue_cents"]}
                            for r in parquet_rows},
        "parquet_duplicate_keys": sorted(k for k, n in Counter(parquet_keys).items() if n > 1),
        "batch_by_offsets": {"got": by_offsets, "expected": expected_offsets},
        "batch_by_timestamp": {"ts": ts, "got": [[p, o] for p, o, _ in by_ts],
                               "expected": [list(x) for x in expected_ts],
                               "min_ts": min((s for _, _, s in by_ts), default=None)},
        "isolation": isolation,
        "timings": timings,
    }


def checks(r: dict[str, Any]) -> dict[str, bool]:
    exp = r["expected_windows"]
    return {
        "kafka sink: every closed window exactly once, right totals":
            r["kafka_windows"] == exp and not r["kafka_duplicate_keys"],
        "parquet sink: every closed window exactly once, right totals":
            r["parquet_windows"] == exp and not r["parquet_duplicate_keys"],
        "restart continued (windows emitted in both runs)":
            0 < r["kafka_windows_after_run1"] < len(r["kafka_windows"]),
        "batch startingOffsets/endingOffsets":
            [tuple(x) for x in r["batch_by_offsets"]["got"]] ==
            [tuple(x) for x in r["batch_by_offsets"]["expected"]],
        "batch startingTimestamp":
            r["batch_by_timestamp"]["got"] == r["batch_by_timestamp"]["expected"],
        "batch read_committed: committed transactions only":
            all(r["isolation"][when]["read_committed"]["values"] ==
                r["isolation"]["expected_committed"] for when in ("while_open", "after_abort")),
        "batch read_uncommitted: aborted and open transactions too":
            all(r["isolation"][when]["read_uncommitted"]["values"] ==
                r["isolation"]["expected_all"] for when in ("while_open", "after_abort")),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m spark_demo.run")
    ap.add_argument("--results", type=Path, help="write the results as JSON here")
    ap.add_argument("--workdir", type=Path, help="keep broker data, checkpoints, Parquet here")
    args = ap.parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="kcompat-spark-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    r = run(work)
    if args.results:
        args.results.write_text(json.dumps(r, indent=1, sort_keys=True))
    print(f"\nkcompat Spark demo (work dir {work})")
    print(f"  produced {r['produced']['phase1']} + {r['produced']['phase2']} order events")
    print(f"  streaming runs: {r['progress']}")
    print(f"  windows: expected {len(r['expected_windows'])}, Kafka sink {len(r['kafka_windows'])}"
          f" (after run 1: {r['kafka_windows_after_run1']}), Parquet {len(r['parquet_windows'])}")
    for key in sorted(r["kafka_windows"])[:6]:
        start_ms, region = key.split("|")
        minute = (int(start_ms) - r["window_start_ms"]) // 60_000
        print(f"    minute {minute:2d} {region:5s} {r['kafka_windows'][key]}")
    print(f"  batch by offsets: {len(r['batch_by_offsets']['got'])} records;"
          f" by timestamp: {len(r['batch_by_timestamp']['got'])} records")
    iso = r["isolation"]
    print(f"  transactions {iso['outcomes']}: read_committed"
          f" {len(iso['while_open']['read_committed']['values'])} records,"
          f" read_uncommitted {len(iso['while_open']['read_uncommitted']['values'])}")
    print(f"  timings: { {k: round(v, 1) for k, v in r['timings'].items()} }")
    ok = True
    for name, passed in checks(r).items():
        print(f"  [{'ok' if passed else 'FAIL'}] {name}")
        ok &= passed
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
