"""Spark's built-in format("kafka") source and sink against kcompat, through PySpark.

Runs ``python -m spark_demo.run`` (what ``make demo`` runs: its own kcompat broker,
a generator, two streaming queries with checkpoints stopped and restarted, two batch
reads) once per module and asserts on the results it writes. The connector jar
(spark-sql-kafka-0-10, same version as pyspark) is resolved from Maven Central into
the Ivy cache ~/.cache/kcompat/ivy on the first run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from compat_tests._broker import REPO_ROOT


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("spark-demo")
    out = work / "results.json"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [sys.executable, "-m", "spark_demo.run", "--results", str(out), "--workdir", str(work)],
        cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=280, env=env,
        stdin=subprocess.DEVNULL)
    if not out.exists():
        pytest.fail(f"spark_demo.run wrote no results (exit {proc.returncode})\n"
                    f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-6000:]}")
    r = json.loads(out.read_text())
    r["_stdout"] = proc.stdout
    r["_returncode"] = proc.returncode
    return r


def test_demo_exits_zero_and_prints_checks(results: dict[str, Any]) -> None:
    assert "[ok] kafka sink" in results["_stdout"], results["_stdout"]
    assert results["_returncode"] == 0, results["_stdout"]


def test_streaming_read_every_order_event(results: dict[str, Any]) -> None:
    produced = results["produced"]["phase1"] + results["produced"]["phase2"]
    for run in ("run1", "run2"):
        rows = {q["name"]: q["input_rows"] for q in results["progress"][run]}
        # Both queries (subscribe and subscribePattern) saw exactly what was produced.
        expected = results["produced"]["phase1" if run == "run1" else "phase2"]
        assert rows == {"windows_to_kafka": expected, "windows_to_parquet": expected}, rows
    assert produced > 1000


def test_kafka_sink_has_every_window_exactly_once(results: dict[str, Any]) -> None:
    assert results["kafka_duplicate_keys"] == []
    assert results["kafka_windows"] == results["expected_windows"]
    assert len(results["expected_windows"]) == 60  # 20 minutes x 3 regions
    assert results["kafka_headers"] == [json.dumps({"producer": "kcompat-spark-demo"})]


def test_parquet_sink_has_every_window_exactly_once(results: dict[str, Any]) -> None:
    assert results["parquet_duplicate_keys"] == []
    assert results["parquet_windows"] == results["expected_windows"]


def test_restart_from_checkpoint_continues(results: dict[str, Any]) -> None:
    """Run 1 closed minutes 0-6; the restarted run added the rest, none twice, and
    the late orders for minute 2 (behind the watermark) were dropped, not re-emitted."""
    assert results["kafka_windows_after_run1"] == 21
    assert results["parquet_windows_after_run1"] == 21
    start = results["window_start_ms"]
    minute2_eu = results["kafka_windows"][f"{start + 2 * 60_000}|eu"]
    assert minute2_eu == results["expected_windows"][f"{start + 2 * 60_000}|eu"]


def test_batch_read_by_offset_range(results: dict[str, Any]) -> None:
    b = results["batch_by_offsets"]
    assert b["got"] == b["expected"]
    assert len(b["got"]) > 100


def test_batch_read_by_starting_timestamp(results: dict[str, Any]) -> None:
    b = results["batch_by_timestamp"]
    assert b["got"] == b["expected"]
    total = results["produced"]["phase1"] + results["produced"]["phase2"]
    assert 0 < len(b["got"]) < total / 2  # only the tail of each partition


def test_batch_read_committed_sees_committed_transactions_only(results: dict[str, Any]) -> None:
    """Transactions 1, 3, 5 committed, 2 and 4 aborted after flush(), 6 open during the
    first reads: kafka.isolation.level=read_committed reads exactly the committed records,
    up to the last stable offset, before and after transaction 6 is aborted too."""
    iso = results["isolation"]
    assert iso["outcomes"] == ["commit", "abort", "commit", "abort", "commit", "open"]
    assert len(iso["expected_committed"]) == 150
    for when in ("while_open", "after_abort"):
        got = iso[when]["read_committed"]["values"]
        assert got == iso["expected_committed"], (when, len(got), sorted(set(got) - set(
            iso["expected_committed"]))[:5])
    # Per partition: 5 finished transactions of 25 records, each followed by a marker;
    # the last committed record is offset 128, the open transaction starts at 130.
    assert iso["while_open"]["read_committed"]["max_offset"] == {"0": 128, "1": 128}


def test_batch_read_uncommitted_sees_aborted_and_open_transactions(
        results: dict[str, Any]) -> None:
    iso = results["isolation"]
    assert len(iso["expected_all"]) == 300
    for when in ("while_open", "after_abort"):
        assert iso[when]["read_uncommitted"]["values"] == iso["expected_all"], when
    assert iso["while_open"]["read_uncommitted"]["max_offset"] == {"0": 154, "1": 154}
