"""Spark batch reads (``spark.read.format("kafka")``) of one topic, in one Spark
session, for ``test_spark_delayed``; run as a subprocess, as ``spark_demo.run`` is:

    python -m compat_tests.spark._batch_read --bootstrap HOST:PORT --topic T \\
        --reads READS.json --out RESULT.json

``READS.json`` maps a read's name to its reader options besides
``kafka.bootstrap.servers`` and ``subscribe`` (for instance ``startingOffsets``,
``endingOffsets``, ``includeHeaders``); nothing else is set, so
``failOnDataLoss`` keeps Spark's default (true) unless a read names it.
``subscribe`` in a read's options reads that topic instead of ``--topic``.
A read with ``"_mode": "stream"`` (taken out of the options) is a streaming
read instead (``spark.readStream``, ``Trigger.AvailableNow`` into a memory
sink, a temporary checkpoint): every micro-batch up to the end offsets the
query saw at its start.
``RESULT.json`` gets, per read, its rows (topic, partition, offset, key, value,
timestamp in ms, timestampType, and with includeHeaders the headers as
``[key, value]`` string pairs, and ``n``, the row's position in what Spark
returned) sorted by topic, partition and offset, or the error Spark raised (its
class and full message) and how long the read took.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from spark_demo.pipeline import spark_session


def _text(b: bytes | bytearray | None) -> str | None:
    return None if b is None else bytes(b).decode("utf-8", "replace")


def batch_read(spark: Any, bootstrap: str, topic: str, options: dict[str, str],
               name: str = "read") -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    options = dict(options)
    stream = options.pop("_mode", "batch") == "stream"
    reader = ((spark.readStream if stream else spark.read).format("kafka")
              .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic))
    for k, v in options.items():
        reader = reader.option(k, v)
    df = reader.load()
    cols = ["topic", "partition", "offset", "key", "value",
            F.unix_millis("timestamp").alias("ts"), "timestampType"]
    with_headers = options.get("includeHeaders", "false").lower() == "true"
    if with_headers:
        cols.append("headers")
    if stream:
        table = f"kc_stream_{name}"
        query = (df.select(*cols).writeStream.format("memory").queryName(table)
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        if query.isActive:
            query.stop()
            raise TimeoutError(f"streaming read {name} still running after 120 s")
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        collected = spark.sql(f"SELECT * FROM {table}").collect()
    else:
        collected = df.select(*cols).collect()
    out = []
    for n, r in enumerate(collected):
        row = {"topic": r["topic"], "partition": r["partition"], "offset": r["offset"],
               "key": _text(r["key"]), "value": _text(r["value"]), "timestamp": r["ts"],
               "timestamp_type": r["timestampType"], "n": n}
        if with_headers:
            row["headers"] = [[h["key"], _text(h["value"])] for h in (r["headers"] or [])]
        out.append(row)
    out.sort(key=lambda x: (x["topic"], x["partition"], x["offset"]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m compat_tests.spark._batch_read")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--reads", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    reads: dict[str, dict[str, str]] = json.loads(args.reads.read_text())
    t0 = time.monotonic()
    spark = spark_session("kcompat-batch-read")
    spark.sparkContext.setLogLevel("ERROR")
    result: dict[str, Any] = {"spark_start_s": time.monotonic() - t0, "reads": {}}
    try:
        for name, options in reads.items():
            t = time.monotonic()
            try:
                rows = batch_read(spark, args.bootstrap, args.topic, options, name)
                result["reads"][name] = {"rows": rows, "error": None}
            except Exception as e:  # reported to the test, which decides
                result["reads"][name] = {
                    "rows": None, "error": f"{type(e).__name__}: {e}",
                    "traceback": traceback.format_exc()[-6000:]}
            result["reads"][name]["seconds"] = time.monotonic() - t
    finally:
        spark.stop()
    result["total_s"] = time.monotonic() - t0
    args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
