"""The order pipeline as a long-running streaming driver, one OS process per run:
``python -m spark_demo.stream --bootstrap HOST:PORT --topic orders-x --out-topic w --workdir W``.

It starts the same two queries as ``make demo`` (``pipeline.start_aggregation``: windows
to the Kafka topic and to Parquet, each with its checkpoint under ``W/checkpoints``)
with a processing-time trigger instead of ``availableNow``, and runs until stopped. A
new process given the same work dir resumes both queries from their checkpoints, as a
restarted production job does.

On stdout, one JSON line per event: ``{"event": "started"}`` once both queries run,
``{"event": "progress", ...}`` per finished micro-batch (query name, batch id, input
rows, the source's end offsets, the watermark). SIGTERM (or SIGINT) stops the queries,
writes the Parquet sink's rows to ``--dump-parquet`` if given, stops Spark and exits 0.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from spark_demo import pipeline as P


def _emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "t": round(time.time(), 3), **fields}), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m spark_demo.stream")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True, help="orders topic (subscribe; the Parquet "
                    "query subscribes to the pattern <prefix>-.*)")
    ap.add_argument("--out-topic", required=True)
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--trigger", default="1 second", help="processing-time trigger interval")
    ap.add_argument("--dump-parquet", type=Path, help="on stop, write the Parquet rows here")
    args = ap.parse_args(argv)

    stopping = False

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    spark = P.spark_session("kcompat-orders-stream")
    spark.sparkContext.setLogLevel("ERROR")
    queries = P.start_aggregation(spark, args.bootstrap, args.topic, args.out_topic,
                                  args.workdir, trigger={"processingTime": args.trigger})
    _emit("started", queries=[q.name for q in queries])
    seen: dict[str, int] = {q.name: -1 for q in queries}
    failed = None
    while not stopping:
        for q in queries:
            if q.exception() is not None:
                failed = f"query {q.name} failed: {q.exception()}"
                stopping = True
                break
            for p in q.recentProgress:
                if p["batchId"] > seen[q.name]:
                    seen[q.name] = p["batchId"]
                    source = p["sources"][0] if p["sources"] else {}
                    _emit("progress", query=q.name, batch=p["batchId"],
                          rows=p["numInputRows"], end_offset=source.get("endOffset"),
                          watermark=p.get("eventTime", {}).get("watermark"))
        time.sleep(0.3)
    for q in queries:
        q.stop()
    _emit("stopped", error=failed)
    if args.dump_parquet is not None:
        rows = P.read_parquet_windows(spark, args.workdir)
        args.dump_parquet.write_text(json.dumps(rows, default=str))
    spark.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
