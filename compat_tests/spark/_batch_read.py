"""Spark batch reads (``spark.read.format("kafka")``) of one topic, in one Spark
session, for ``test_spark_delayed``; run as a subprocess, as ``spark_demo.run`` is:

    python -m compat_tests.spark._batch_read --bootstrap HOST:PORT --topic T \\
        --reads READS.json --out RESULT.json

``READS.json`` maps a read's name to its reader options besides
``kafka.bootstrap.servers`` and ``subscribe`` (for instance ``startingOffsets``,
``endingOffsets``, ``includeHeaders``); nothing else is set, so
``failOnDataLoss`` keeps Spark's default (true) unless a read names it.
``RESULT.json`` gets, per read, its rows (partition, offset, key, value,
timestamp in ms, timestampType, and with includeHeaders the headers as
``[key, value]`` string pairs) sorted by partition and offset, or the error
Spark raised (its class and full message) and how long the read took.
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


def batch_read(spark: Any, bootstrap: str, topic: str, options: dict[str, str]
               ) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    reader = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic))
    for k, v in options.items():
        reader = reader.option(k, v)
    df = reader.load()
    cols = ["partition", "offset", "key", "value",
            F.unix_millis("timestamp").alias("ts"), "timestampType"]
    with_headers = options.get("includeHeaders", "false").lower() == "true"
    if with_headers:
        cols.append("headers")
    out = []
    for r in df.select(*cols).collect():
        row = {"partition": r["partition"], "offset": r["offset"], "key": _text(r["key"]),
               "value": _text(r["value"]), "timestamp": r["ts"],
               "timestamp_type": r["timestampType"]}
        if with_headers:
            row["headers"] = [[h["key"], _text(h["value"])] for h in (r["headers"] or [])]
        out.append(row)
    out.sort(key=lambda x: (x["partition"], x["offset"]))
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
                rows = batch_read(spark, args.bootstrap, args.topic, options)
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
