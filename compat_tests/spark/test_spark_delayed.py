"""Spark's format("kafka") batch source over a topic with delayed delivery
(docs/extensions.md, ``kc-delay-ms``) against a kcompat broker process, through PySpark.

kafka-python writes a 2-partition topic in three flushed waves: mixed batches
(every second record delayed), batches whose records are all delayed (stored
empty, as Kafka's cleaner leaves them), and plain batches. Once every delayed
record was appended again (kafka-python sees them), ``_batch_read`` runs Spark
batch reads in one session (a subprocess, as ``test_spark`` runs
``spark_demo.run``), with Spark's defaults (``failOnDataLoss`` true):

* ``earliest`` .. ``latest`` without and with ``includeHeaders``: every record
  exactly once, at the offset the log has it (plain: its acknowledged offset;
  delayed: a new offset above its hole, ``kc-scheduled-offset`` naming the hole),
  with key, value, timestamp, headers; nothing at a hole; no error from the
  offset gaps or the empty batches;
* an offset range that starts and ends at holes: exactly the records in it;
* a second topic whose delayed records are not due yet (10 minutes), so its log
  ends in holes and an empty batch: exactly its plain records.

The same session reads a filtered view (issue 15: ``kc.view.of`` /
``kc.view.filter``) of a third topic as a topic: records with ``region``
headers (eu, us, apac, EU, none, repeated), in flushed waves so that whole
batches match nothing (the view's partitions start and end with empty
batches) and the others have holes; the view is ``region = 'eu'``. Its rows
(``earliest`` .. ``latest`` without and with ``includeHeaders``, the latter in
one query with the source; an offset range starting and ending inside
filtered-out stretches, in one partition across matches, in the other over
none; a streaming read with ``Trigger.AvailableNow``) must be exactly the
source's matching records, at the source's offsets, with the source's key,
value, timestamp and headers, in offset order, as kafka-python and Spark
itself read the source (filtered client-side).

The connector jar comes from Maven Central into ~/.cache/kcompat/ivy on the first
run (shared with ``test_spark``).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from compat_tests._broker import REPO_ROOT, Broker

pytestmark = pytest.mark.timeout(330)

PARTITIONS = 2
DELAY_MS = 1000
LATE_MS = 15_000
#: never due while the test runs
PENDING_DELAY_MS = 600_000
SCHEDULED_OFFSET = "kc-scheduled-offset"


#: three waves: 20 records, every second delayed; 8 records, all delayed; 12 plain
WAVES = [[i % 2 == 1 for i in range(20)], [True] * 8, [False] * 12]


def produce(bootstrap: str, topic: str, waves: list[list[bool]] = WAVES,
            delay_ms: int = DELAY_MS) -> list[dict[str, Any]]:
    """The waves (True: delayed), each flushed (one batch per partition and wave),
    to partition ``(i // 2) % 2`` so both partitions get every kind. The
    acknowledgements."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, acks="all")
    sent: list[dict[str, Any]] = []
    try:
        i = 0
        for wave in waves:
            futures = []
            for delayed in wave:
                headers = [("seq", str(i).encode())]
                if delayed:
                    headers.append(("kc-delay-ms", str(delay_ms).encode()))
                part = (i // 2) % PARTITIONS
                futures.append((i, delayed, headers, time.time_ns() // 1_000_000,
                                producer.send(topic, key=f"k{i}".encode(),
                                              value=f"v{i}".encode(), partition=part,
                                              headers=headers)))
                i += 1
            producer.flush()
            for n, delayed, headers, sent_ms, fut in futures:
                md = fut.get(timeout=30)
                sent.append({"i": n, "delayed": delayed, "partition": md.partition,
                             "offset": md.offset, "timestamp": md.timestamp,
                             "headers": [[k, v.decode()] for k, v in headers],
                             "sent_ms": sent_ms})
    finally:
        producer.close()
    return sent


#: region header values per wave of the view's source (None: no header; a
#: list: the header repeated, its last value counts); waves 0, 2 and 4 have no
#: match, so every partition of the view starts and ends with an empty batch
REGION_WAVES: list[list[str | list[str] | None]] = [
    ["us", "apac", None, "EU"] * 2,
    ["eu", "us", "eu", "apac", None, "eu", ["us", "eu"], ["eu", "us"], "eu", "eu", "apac", None],
    ["us", None, "apac", ["eu", "us"]] * 2,
    ["eu", "apac", "eu", "eu", None, "us", "eu", "EU"],
    ["apac", "us", None] * 2,
]
VIEW_FILTER = "region = 'eu'"


def produce_regions(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """REGION_WAVES to ``topic``, each wave flushed, record i to partition
    ``(i // 2) % 2``. The acknowledgements, with the wave and the headers."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, acks="all")
    sent: list[dict[str, Any]] = []
    try:
        i = 0
        for w, wave in enumerate(REGION_WAVES):
            futures = []
            for region in wave:
                values = [] if region is None else [region] if isinstance(region, str) else region
                headers = [("seq", str(i).encode())] + [("region", v.encode()) for v in values]
                futures.append((i, headers, producer.send(
                    topic, key=f"k{i}".encode(), value=f"v{i}".encode(),
                    partition=(i // 2) % PARTITIONS, headers=headers)))
                i += 1
            producer.flush()
            for n, headers, fut in futures:
                md = fut.get(timeout=30)
                sent.append({"i": n, "wave": w, "partition": md.partition, "offset": md.offset,
                             "headers": [[k, v.decode()] for k, v in headers]})
    finally:
        producer.close()
    return sent


def is_eu(headers: list[list[str]]) -> bool:
    """``region = 'eu'``: the last ``region`` header is exactly ``eu``."""
    regions = [v for k, v in headers if k == "region"]
    return bool(regions) and regions[-1] == "eu"


def read_all(bootstrap: str, topic: str, want: int, timeout_s: float,
             settle_s: float = 1.0) -> list[dict[str, Any]]:
    """kafka-python, assigned from the log start, until ``want`` records (and the
    end offsets) are read or ``timeout_s`` passed; then ``settle_s`` more for extras."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    c.assign(tps)
    rows: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    done_at: float | None = None
    try:
        while time.monotonic() < deadline:
            if done_at is not None and time.monotonic() > done_at + settle_s:
                break
            for recs in c.poll(timeout_ms=200).values():
                for r in recs:
                    rows.append({"partition": r.partition, "offset": r.offset,
                                 "key": r.key.decode(), "value": r.value.decode(),
                                 "timestamp": r.timestamp, "timestamp_type": r.timestamp_type,
                                 "headers": [[k, v.decode()] for k, v in r.headers]})
            if done_at is None and len(rows) >= want:
                ends = c.end_offsets(tps)
                if all(c.position(tp) >= ends[tp] for tp in tps):
                    done_at = time.monotonic()
    finally:
        c.close()
    return sorted(rows, key=lambda r: (r["partition"], r["offset"]))


def stored_batches(broker: Broker, topic: str, partition: int) -> list[tuple[int, int, int]]:
    """(baseOffset, lastOffsetDelta, recordsCount) of every stored RecordBatch v2."""
    out = []
    for path in sorted((broker.data_dir / f"{topic}-{partition}").glob("*.log")):
        data = path.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            base, batch_len = struct.unpack_from(">qi", data, pos)
            if batch_len <= 0 or data[pos + 16] != 2:
                break
            (delta,) = struct.unpack_from(">i", data, pos + 23)
            (count,) = struct.unpack_from(">i", data, pos + 57)
            out.append((base, delta, count))
            pos += 12 + batch_len
    return out


def run_spark(tmp: Path, bootstrap: str, topic: str, reads: dict[str, dict[str, str]]
              ) -> dict[str, Any]:
    (tmp / "reads.json").write_text(json.dumps(reads))
    out = tmp / "result.json"
    proc = subprocess.run(
        [sys.executable, "-m", "compat_tests.spark._batch_read", "--bootstrap", bootstrap,
         "--topic", topic, "--reads", str(tmp / "reads.json"), "--out", str(out)],
        cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=280,
        env=dict(os.environ, PYTHONUNBUFFERED="1"), stdin=subprocess.DEVNULL)
    if not out.exists():
        pytest.fail(f"_batch_read wrote no results (exit {proc.returncode})\n--- stdout ---\n"
                    f"{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-6000:]}")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def test_spark_batch_read_over_delayed_records(broker: Broker, topic: str,
                                               tmp_path: Path) -> None:
    pending_topic = f"{topic}-pending"
    source, view = f"{topic}-src", f"{topic}-eu"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in (topic, pending_topic, source)])
        admin.create_topics([NewTopic(view, PARTITIONS, 1, topic_configs={
            "kc.view.of": source, "kc.view.filter": VIEW_FILTER})])
    finally:
        admin.close()
    region_sent = produce_regions(broker.bootstrap, source)
    # Delayed records not yet due when Spark reads: the log ends in holes (a
    # batch left empty after a mixed one).
    pending = produce(broker.bootstrap, pending_topic, [WAVES[0], [True] * 8], PENDING_DELAY_MS)
    sent = produce(broker.bootstrap, topic)
    by_value = {f"v{s['i']}": s for s in sent}
    holes = {(s["partition"], s["offset"]) for s in sent if s["delayed"]}

    # Wait until every delayed record is due and appended again.
    log = read_all(broker.bootstrap, topic, len(sent), DELAY_MS / 1000 + LATE_MS / 1000)
    values = Counter(r["value"] for r in log)
    assert set(values) == set(by_value) and set(values.values()) == {1}, (
        f"kafka-python: missing {sorted(set(by_value) - set(values))[:5]}, "
        f"twice {[v for v, n in values.items() if n > 1][:5]}")
    # The contract, as kafka-python reads the log (the reference Spark is held to).
    for r in log:
        s = by_value[r["value"]]
        assert r["partition"] == s["partition"] and r["key"] == f"k{s['i']}", (r, s)
        assert (r["partition"], r["offset"]) not in holes, r
        if s["delayed"]:
            assert r["offset"] > s["offset"], (r, s)
            assert r["headers"] == s["headers"] + [[SCHEDULED_OFFSET, str(s["offset"])]], (r, s)
        else:
            assert r["offset"] == s["offset"] and r["headers"] == s["headers"], (r, s)
    # The log has what the reads must cross: gaps and batches left empty.
    batches = {p: stored_batches(broker, topic, p) for p in range(PARTITIONS)}
    for p, bs in batches.items():
        assert any(count == 0 and delta > 0 for _b, delta, count in bs), (p, bs)
        assert any(0 < count < delta + 1 for _b, delta, count in bs), (p, bs)

    # Offsets at holes to start and end a range read at.
    first_hole = {p: min(o for q, o in holes if q == p) for p in range(PARTITIONS)}
    last_hole = {p: max(o for q, o in holes if q == p) for p in range(PARTITIONS)}
    ranges = {"starting": {topic: {str(p): o for p, o in first_hole.items()}},
              "ending": {topic: {"0": last_hole[0], "1": -1}}}
    reads = {
        "default": {"startingOffsets": "earliest", "endingOffsets": "latest"},
        "headers": {"startingOffsets": "earliest", "endingOffsets": "latest",
                    "includeHeaders": "true"},
        "hole_to_hole": {"startingOffsets": json.dumps(ranges["starting"]),
                         "endingOffsets": json.dumps(ranges["ending"])},
        "pending": {"subscribe": pending_topic, "startingOffsets": "earliest",
                    "endingOffsets": "latest", "includeHeaders": "true"},
    }
    view_ranges = view_reads(reads, source, view, region_sent)
    t0 = time.monotonic()
    result = run_spark(tmp_path, broker.bootstrap, topic, reads)
    elapsed = time.monotonic() - t0
    errors = {name: r["error"] for name, r in result["reads"].items() if r["error"]}
    assert not errors, "Spark failed:\n" + "\n".join(
        f"[{n}] {result['reads'][n]['traceback']}" for n in errors)

    def strip(rows: list[dict[str, Any]], headers: bool) -> list[tuple[Any, ...]]:
        return [(r["partition"], r["offset"], r["key"], r["value"], r["timestamp"],
                 r["timestamp_type"], json.dumps(r["headers"]) if headers else None)
                for r in rows]

    for name, headers in (("default", False), ("headers", True)):
        rows = result["reads"][name]["rows"]
        got_values = Counter(r["value"] for r in rows)
        dup = sorted(v for v, n in got_values.items() if n > 1)
        missing = sorted(set(by_value) - set(got_values))
        assert not dup and not missing, f"[{name}] twice {dup[:5]}, missing {missing[:5]}"
        assert strip(rows, headers) == strip(log, headers), (
            f"[{name}] Spark rows != the log:\n"
            f"{sorted(set(strip(rows, headers)) ^ set(strip(log, headers)))[:6]}")
    rng = result["reads"]["hole_to_hole"]["rows"]
    want = [r for r in log if r["offset"] >= first_hole[r["partition"]]
            and (r["partition"] == 1 or r["offset"] < last_hole[0])]
    assert strip(rng, False) == strip(want, False), (
        f"[hole_to_hole] {ranges}: got {[(r['partition'], r['offset']) for r in rng]}, "
        f"want {[(r['partition'], r['offset']) for r in want]}")
    # Not yet due: exactly the plain records, at their offsets; the log end (past
    # the trailing holes) is no data loss.
    pending_plain = read_all(broker.bootstrap, pending_topic,
                             sum(not s["delayed"] for s in pending), 10)
    assert sorted((r["partition"], r["offset"], r["value"]) for r in pending_plain) == sorted(
        (s["partition"], s["offset"], f"v{s['i']}") for s in pending if not s["delayed"])
    rows = result["reads"]["pending"]["rows"]
    assert strip(rows, True) == strip(pending_plain, True), (
        f"[pending] got {[(r['partition'], r['offset']) for r in rows]}, want "
        f"{[(r['partition'], r['offset']) for r in pending_plain]}")
    check_view(broker, result, source, view, region_sent, view_ranges)
    print(f"{len(sent)} records ({len(holes)} delayed); batches {batches}; Spark session "
          f"{result['spark_start_s']:.1f} s, reads "
          f"{ {n: round(r['seconds'], 1) for n, r in result['reads'].items()} }, "
          f"session total {result['total_s']:.1f} s, subprocess {elapsed:.1f} s")


def view_reads(reads: dict[str, dict[str, str]], source: str, view: str,
               sent: list[dict[str, Any]]) -> dict[int, tuple[int, int]]:
    """Add the reads of the view (one of them with its source) to ``reads``; the
    offset range [start, end) per partition of the range read."""
    def at(wave: int, partition: int, k: int) -> int:
        """The offset of the k-th record of ``wave`` in ``partition``."""
        return [s["offset"] for s in sent if s["wave"] == wave and s["partition"] == partition][k]

    # Starts and ends strictly inside stretches with no match (waves 0, 2, 4):
    # partition 0 across matches, partition 1 over none at all.
    ranges = {0: (at(2, 0, 1), at(4, 0, 1)), 1: (at(0, 1, 1), at(0, 1, 3))}
    everything = {"startingOffsets": "earliest", "endingOffsets": "latest"}
    reads.update({
        "view_default": dict(everything, subscribe=view),
        # the source in the same query: Spark's own read of a topic to compare with
        "view_headers": dict(everything, subscribe=f"{source},{view}", includeHeaders="true"),
        "view_range": {"subscribe": view,
                       "startingOffsets": json.dumps({view: {str(p): a for p, (a, _) in
                                                             ranges.items()}}),
                       "endingOffsets": json.dumps({view: {str(p): b for p, (_, b) in
                                                           ranges.items()}})},
        "view_stream": {"_mode": "stream", "subscribe": view, "startingOffsets": "earliest",
                        "includeHeaders": "true"},
    })
    return ranges


def check_view(broker: Broker, result: dict[str, Any], source: str, view: str,
               sent: list[dict[str, Any]], ranges: dict[int, tuple[int, int]]) -> None:
    """Spark's reads of the view are the source's ``region = 'eu'`` records."""
    # The source as kafka-python reads it (every record, at its acknowledged offset;
    # nothing is appended later).
    log = read_all(broker.bootstrap, source, len(sent), 10, settle_s=0)
    assert [(r["partition"], r["offset"], r["value"], r["headers"]) for r in log] == sorted(
        (s["partition"], s["offset"], f"v{s['i']}", s["headers"]) for s in sent)
    want = [r for r in log if is_eu(r["headers"])]
    # The view's log has what a read must cross: batches with no match at its
    # start and end, and matches next to non-matches.
    for p in range(PARTITIONS):
        eu = {s["offset"]: is_eu(s["headers"]) for s in sent if s["partition"] == p}
        kinds = [sum(eu[o] for o in range(base, base + delta + 1)) / (delta + 1)
                 for base, delta, _count in stored_batches(broker, source, p)]
        assert kinds[0] == kinds[-1] == 0 and any(0 < k < 1 for k in kinds), (p, kinds)
    assert len(want) == sum(is_eu(s["headers"]) for s in sent) == 10, len(want)

    def strip(rows: list[dict[str, Any]], headers: bool) -> list[tuple[Any, ...]]:
        return [(r["partition"], r["offset"], r["key"], r["value"], r["timestamp"],
                 r["timestamp_type"], json.dumps(r["headers"]) if headers else None)
                for r in rows]

    reads = result["reads"]
    both = reads["view_headers"]["rows"]
    assert {r["topic"] for r in both} == {source, view}, {r["topic"] for r in both}
    # Spark reads the source as kafka-python does.
    spark_source = [r for r in both if r["topic"] == source]
    assert strip(spark_source, True) == strip(log, True)
    in_range = [w for w in want if ranges[w["partition"]][0] <= w["offset"]
                < ranges[w["partition"]][1]]
    assert {w["partition"] for w in in_range} == {0}, in_range
    expected = {"view_default": (want, False), "view_headers": (want, True),
                "view_range": (in_range, False), "view_stream": (want, True)}
    for name, (rows_want, headers) in expected.items():
        rows = [r for r in reads[name]["rows"] if r["topic"] == view or name != "view_headers"]
        assert {r["topic"] for r in rows} <= {view}, name
        assert strip(rows, headers) == strip(rows_want, headers), (
            f"[{name}] {ranges if name == 'view_range' else ''} got "
            f"{[(r['partition'], r['offset'], r['value']) for r in rows]}, want "
            f"{[(r['partition'], r['offset'], r['value']) for r in rows_want]}")
        if headers:  # the view as Spark filtered its own read of the source
            assert strip(rows, True) == strip(
                [r for r in spark_source if is_eu(r["headers"])], True), name
        # Spark returned each partition's rows in offset order.
        for p in range(PARTITIONS):
            ns = [r["n"] for r in rows if r["partition"] == p]
            assert ns == sorted(ns), (name, p, [(r["offset"], r["n"]) for r in rows])
