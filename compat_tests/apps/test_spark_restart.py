"""The Spark order pipeline stopped and restarted as a new OS process from its
checkpoints, against kcompat (one broker and a 3-broker cluster) and against Apache
Kafka 4.4.0 (same assertions).

``python -m spark_demo.stream`` runs the two streaming queries of ``spark_demo``
(``format("kafka")`` source with ``subscribe`` -> windows to a Kafka topic; with
``subscribePattern`` -> windows to Parquet) with a 1 s processing-time trigger until
it is stopped. Three processes share one work dir (checkpoints, Parquet):

1. orders for minutes 0-7; run 1 processes them and is stopped with SIGTERM between
   micro-batches (the queries idle at the end of the input);
2. orders for minutes 8-13 arrive while no pipeline runs; run 2 resumes from the
   checkpoints and is killed -9 (driver and JVM) between micro-batches;
3. orders for minutes 14-19, three late orders for minute 2 (behind the watermark
   kept in the checkpoint: dropped) and a far-ahead event that closes every window;
   run 3 resumes and is stopped with SIGTERM, writing the Parquet rows it reads.

Asserted: each run read exactly the records produced since the previous one (the
source resumed at the checkpointed offsets), each run emitted windows, and the output
topic read with read_committed holds every closed window exactly once with exact
order counts and revenue; the Parquet sink too.

Spark's Kafka sink is at-least-once: a driver killed while a micro-batch is writing
re-runs that batch when it restarts, so the kill here happens between micro-batches.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from compat_tests._broker import REPO_ROOT
from compat_tests.apps.conftest import DEPLOYMENTS, deployment_of
from compat_tests.java.conftest import json_lines
from spark_demo import pipeline as P

IN_PARTITIONS, OUT_PARTITIONS = 3, 2
PER_MINUTE = 40
START_TIMEOUT_S = 150.0
IDLE_S = 4.0  # no micro-batch for this long after the input's end: between batches


@pytest.fixture(scope="module", params=DEPLOYMENTS)
def deployment(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """(bootstrap, replication factor)."""
    yield from deployment_of(request, tmp_path_factory, "spark")


class Driver:
    """One ``python -m spark_demo.stream`` process (its own session: a kill -9 of the
    process group takes the Spark JVM with it, as a crashed driver host would)."""

    def __init__(self, args: list[str], log: Path, out: Path) -> None:
        self.out = out
        self.log = log
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(out, "wb") as stdout, open(log, "wb") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "spark_demo.stream", *args], cwd=str(REPO_ROOT),
                env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                start_new_session=True)

    def events(self) -> list[dict[str, Any]]:
        return json_lines(self.out.read_text(errors="replace") if self.out.exists() else "")

    def progress(self, query: str) -> list[dict[str, Any]]:
        return [e for e in self.events() if e["event"] == "progress" and e["query"] == query]

    def explain(self) -> str:
        err = self.log.read_text(errors="replace") if self.log.exists() else ""
        return (f"exit {self.proc.poll()}\n--- stdout ---\n"
                f"{self.out.read_text(errors='replace')[-3000:] if self.out.exists() else ''}"
                f"\n--- stderr (tail) ---\n{err[-5000:]}")

    def sigterm(self, timeout: float = 60.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            self.kill9()
            raise AssertionError(f"driver ignored SIGTERM for {timeout}s\n{self.explain()}") from exc

    def kill9(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)


def _offsets(end_offset: Any, topic: str) -> dict[int, int]:
    if isinstance(end_offset, str):
        end_offset = json.loads(end_offset)
    return {int(p): int(o) for p, o in (end_offset or {}).get(topic, {}).items()}


def _wait_idle_at(driver: Driver, topic: str, ends: dict[int, int]) -> None:
    """Until both queries finished a micro-batch ending at ``ends`` and ran none for IDLE_S."""
    deadline = time.monotonic() + START_TIMEOUT_S
    queries = ("windows_to_kafka", "windows_to_parquet")
    while True:
        if driver.proc.poll() is not None:
            raise AssertionError(f"driver exited early\n{driver.explain()}")
        now = time.time()
        done = True
        for q in queries:
            prog = driver.progress(q)
            reached = [e for e in prog if _offsets(e["end_offset"], topic) == ends]
            if not reached or now - prog[-1]["t"] < IDLE_S:
                done = False
        if done:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"queries not idle at {ends} after {START_TIMEOUT_S:.0f}s\n"
                                 f"{driver.explain()}")
        time.sleep(0.5)


def _read_windows(bootstrap: str, topic: str) -> list[tuple[str, dict[str, Any]]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(OUT_PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    ends = consumer.end_offsets(tps)
    rows: list[tuple[str, dict[str, Any]]] = []
    deadline = time.monotonic() + 30
    while any(consumer.position(tp) < ends[tp] for tp in tps):
        assert time.monotonic() < deadline, "output topic not read to its end in 30 s"
        for recs in consumer.poll(timeout_ms=500).values():
            rows.extend((r.key.decode(), json.loads(r.value)) for r in recs)
    consumer.close()
    return rows


def _ends(acks: list[tuple[int, int, int]], previous: dict[int, int]) -> dict[int, int]:
    ends = dict(previous)
    for p, o, _ in acks:
        ends[p] = max(ends.get(p, 0), o + 1)
    return ends


def test_pipeline_restarted_as_new_process(deployment: tuple[str, int],
                                           tmp_path: Path) -> None:
    bootstrap, rf = deployment
    uid = uuid.uuid4().hex[:8]
    topic, out_topic = f"orders{uid}-v1", f"windows{uid}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, IN_PARTITIONS, rf),
                             NewTopic(out_topic, OUT_PARTITIONS, rf)])
    finally:
        admin.close()
    work = tmp_path / "work"
    work.mkdir()
    now = int(time.time() * 1000)
    start = (now - 50 * 60_000) // 60_000 * 60_000
    phase1 = P.make_orders(start, range(0, 8), PER_MINUTE, seed=1)
    phase2 = P.make_orders(start, range(8, 14), PER_MINUTE, seed=2)
    late = [P.Order(f"late-{i}", "c1", "eu", 1000 + i, start + 2 * 60_000 + 1000 * i)
            for i in range(3)]
    flush = [P.Order("flush", "c0", "eu", 1, start + 30 * 60_000)]
    phase3 = P.make_orders(start, range(14, 20), PER_MINUTE, seed=3) + late + flush
    base = ["--bootstrap", bootstrap, "--topic", topic, "--out-topic", out_topic,
            "--workdir", str(work)]
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    windows_after: list[int] = []
    rows_read: list[dict[str, int]] = []
    ends: dict[int, int] = {}
    dump = tmp_path / "parquet.json"
    stops = ["sigterm", "kill9", "sigterm"]
    for run, (orders, stop) in enumerate(zip((phase1, phase2, phase3), stops,
                                             strict=True), start=1):
        acks = P.generate_orders(bootstrap, topic, orders)
        ends = _ends(acks, ends)
        args = base + (["--dump-parquet", str(dump)] if run == 3 else [])
        t = time.monotonic()
        driver = Driver(args, tmp_path / f"run{run}.stderr", tmp_path / f"run{run}.stdout")
        try:
            _wait_idle_at(driver, topic, ends)
            rows_read.append({q: sum(e["rows"] for e in driver.progress(q))
                              for q in ("windows_to_kafka", "windows_to_parquet")})
            if stop == "sigterm":
                rc = driver.sigterm()
                assert rc == 0, f"run {run}: exit {rc} after SIGTERM\n{driver.explain()}"
            else:
                driver.kill9()
        finally:
            if driver.proc.poll() is None:
                driver.kill9()
        timings[f"run{run}_s"] = round(time.monotonic() - t, 1)
        windows_after.append(len(_read_windows(bootstrap, out_topic)))
    timings["total_s"] = round(time.monotonic() - t0, 1)

    rows = _read_windows(bootstrap, out_topic)
    expected = P.expected_windows(phase1 + phase2 + phase3,
                                  dropped_late={o.order_id for o in late})
    expected = {k: v for k, v in expected.items() if int(k.split("|")[0]) < start + 28 * 60_000}
    print(f"\n[{bootstrap} rf={rf}] windows after each run {windows_after},"
          f" rows read per run {rows_read}, timings {timings}")

    # Each process read exactly what arrived since the previous one stopped.
    for run, orders in enumerate((phase1, phase2, phase3)):
        assert rows_read[run] == {"windows_to_kafka": len(orders),
                                  "windows_to_parquet": len(orders)}, (run + 1, rows_read)
    # Each process emitted windows; none of them re-emitted an earlier one.
    assert 0 < windows_after[0] < windows_after[1] < windows_after[2] == len(rows)
    keys = Counter(k for k, _ in rows)
    assert [k for k, n in keys.items() if n > 1] == []
    got = {k: {"orders": v["orders"], "revenue_cents": v["revenue_cents"]} for k, v in rows}
    assert len(expected) == 60  # 20 minutes x 3 regions
    assert got == expected
    # The Parquet sink (subscribePattern source, file sink with its own commit log).
    parquet = json.loads(dump.read_text())
    pkeys = Counter(f"{r['window_start_ms']}|{r['region']}" for r in parquet)
    assert [k for k, n in pkeys.items() if n > 1] == []
    assert {f"{r['window_start_ms']}|{r['region']}":
            {"orders": r["orders"], "revenue_cents": r["revenue_cents"]}
            for r in parquet} == expected
