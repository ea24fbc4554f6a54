"""The order pipeline: PySpark Structured Streaming over Kafka (kcompat) with format("kafka").

* ``generate_orders`` — a producer of JSON order events (key = customer, headers
  ``event-type`` and ``schema``, record timestamp = event time) into a Kafka topic.
* ``start_aggregation`` — streaming jobs: read ``format("kafka")`` (one with ``subscribe``,
  one with ``subscribePattern``), drop non-order events by header, parse JSON, aggregate
  revenue per 1-minute event-time window and region with a 2-minute watermark, and
  write finished windows (append mode) to a Kafka topic with the Kafka sink and to
  Parquet, each with its own checkpoint.
* ``batch_by_offsets`` / ``batch_by_timestamp`` — bounded batch reads.
* ``write_transactions`` / ``batch_by_isolation`` — a transactional producer
  (confluent-kafka) commits some transactions and aborts others, and a batch read with
  ``kafka.isolation.level`` read_committed / read_uncommitted.

Spark's connector (spark-sql-kafka-0-10, same version as pyspark) comes from Maven
Central through ``spark.jars.packages`` into the Ivy cache ``spark.jars.ivy``.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WINDOW = "1 minute"
WATERMARK = "2 minutes"
REGIONS = ("eu", "us", "apac")


def cache_dir() -> Path:
    root = Path(os.environ.get("COMPAT_CACHE", Path.home() / ".cache" / "kcompat"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def spark_session(app: str = "kcompat-orders") -> Any:
    import pyspark
    from pyspark.sql import SparkSession

    version = pyspark.__version__
    return (
        SparkSession.builder.master("local[2]").appName(app)
        .config("spark.jars.packages", f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version}")
        .config("spark.jars.ivy", str(cache_dir() / "ivy"))
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )


@dataclass(frozen=True)
class Order:
    order_id: str
    customer: str
    region: str
    amount_cents: int
    event_ms: int
    event_type: str = "order"


def make_orders(start_minute_ms: int, minutes: range, per_minute: int, seed: int) -> list[Order]:
    rnd = random.Random(seed)
    out = []
    for m in minutes:
        for i in range(per_minute):
            region = REGIONS[rnd.randrange(len(REGIONS))]
            out.append(Order(
                order_id=f"o-{seed}-{m}-{i}", customer=f"c{rnd.randrange(50)}", region=region,
                amount_cents=rnd.randrange(100, 10_000),
                event_ms=start_minute_ms + m * 60_000 + rnd.randrange(60_000),
                # A few test events the pipeline must filter out by header.
                event_type="test" if i % 25 == 24 else "order",
            ))
    return out


def generate_orders(bootstrap: str, topic: str, orders: list[Order]) -> list[tuple[int, int, int]]:
    """Send the orders (keyed by customer, headers, timestamp = event time).
    Returns (partition, offset, timestamp) of every acknowledged record."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    futures = []
    for o in orders:
        value = json.dumps({"order_id": o.order_id, "customer": o.customer, "region": o.region,
                            "amount_cents": o.amount_cents, "event_time_ms": o.event_ms})
        futures.append(producer.send(
            topic, key=o.customer.encode(), value=value.encode(), timestamp_ms=o.event_ms,
            headers=[("event-type", o.event_type.encode()), ("schema", b"orders/v1")]))
    producer.flush()
    acks = []
    for f in futures:
        md = f.get(timeout=30)
        acks.append((md.partition, md.offset, md.timestamp))
    producer.close()
    return acks


def expected_windows(orders: list[Order], dropped_late: set[str]) -> dict[str, dict[str, int]]:
    """The aggregates the pipeline must emit: key ``<window start ms>|<region>``."""
    out: dict[str, dict[str, int]] = {}
    for o in orders:
        if o.event_type != "order" or o.order_id in dropped_late:
            continue
        start = o.event_ms // 60_000 * 60_000
        agg = out.setdefault(f"{start}|{o.region}", {"orders": 0, "revenue_cents": 0})
        agg["orders"] += 1
        agg["revenue_cents"] += o.amount_cents
    return out


def _aggregates(spark: Any, bootstrap: str, source: dict[str, str]) -> Any:
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([
        StructField("order_id", StringType()), StructField("customer", StringType()),
        StructField("region", StringType()), StructField("amount_cents", LongType()),
        StructField("event_time_ms", LongType()),
    ])
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("startingOffsets", "earliest")
              .option("includeHeaders", "true")
              .option("maxOffsetsPerTrigger", "2000"))
    for k, v in source.items():
        reader = reader.option(k, v)
    raw = reader.load()
    event_type = F.expr("filter(headers, h -> h.key = 'event-type')[0].value").cast("string")
    orders = (raw.where(event_type == "order")
              .select(F.from_json(F.col("value").cast("string"), schema).alias("o"))
              .select("o.*")
              .withColumn("event_time", F.timestamp_millis(F.col("event_time_ms"))))
    return (orders.withWatermark("event_time", WATERMARK)
            .groupBy(F.window("event_time", WINDOW), F.col("region"))
            .agg(F.count("*").alias("orders"), F.sum("amount_cents").alias("revenue_cents"))
            .select(F.unix_millis(F.col("window.start")).alias("window_start_ms"),
                    "region", "orders", "revenue_cents"))


def start_aggregation(spark: Any, bootstrap: str, topic: str, out_topic: str, work: Path,
                      trigger: dict[str, Any] | None = None) -> list[Any]:
    """Start both streaming queries, by default with trigger(availableNow): they process
    what is in the topic, emit the windows the watermark closed, and stop (``trigger``,
    e.g. ``{"processingTime": "1 second"}``, keeps them running: ``spark_demo.stream``).
    Returns the queries."""
    trigger = trigger or {"availableNow": True}
    from pyspark.sql import functions as F

    to_kafka = (_aggregates(spark, bootstrap, {"subscribe": topic})
                .select(F.concat_ws("|", F.col("window_start_ms").cast("string"),
                                    F.col("region")).alias("key"),
                        F.to_json(F.struct("window_start_ms", "region", "orders",
                                           "revenue_cents")).alias("value"),
                        F.array(F.struct(F.lit("producer").alias("key"),
                                         F.lit(b"kcompat-spark-demo").alias("value")))
                        .alias("headers"))
                .writeStream.format("kafka").outputMode("append")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("topic", out_topic)
                .option("checkpointLocation", str(work / "checkpoints" / "to-kafka"))
                .trigger(**trigger).queryName("windows_to_kafka").start())
    pattern = topic.rsplit("-", 1)[0] + "-.*"
    to_parquet = (_aggregates(spark, bootstrap, {"subscribePattern": pattern})
                  .writeStream.format("parquet").outputMode("append")
                  .option("path", str(work / "parquet" / "windows"))
                  .option("checkpointLocation", str(work / "checkpoints" / "to-parquet"))
                  .trigger(**trigger).queryName("windows_to_parquet").start())
    return [to_kafka, to_parquet]


def run_aggregation(spark: Any, bootstrap: str, topic: str, out_topic: str, work: Path,
                    timeout_s: float = 240) -> list[dict[str, Any]]:
    queries = start_aggregation(spark, bootstrap, topic, out_topic, work)
    progress = []
    for q in queries:
        finished = q.awaitTermination(timeout_s)
        if q.exception() is not None:
            raise RuntimeError(f"query {q.name} failed: {q.exception()}")
        if not finished:
            q.stop()
            raise RuntimeError(f"query {q.name} did not finish in {timeout_s}s")
        progress.append({"name": q.name,
                         "batches": len(q.recentProgress),
                         "input_rows": sum(p["numInputRows"] for p in q.recentProgress)})
    return progress


def batch_by_offsets(spark: Any, bootstrap: str, topic: str,
                     starting: dict[str, int], ending: dict[str, int]) -> list[tuple[int, int]]:
    df = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic)
          .option("startingOffsets", json.dumps({topic: starting}))
          .option("endingOffsets", json.dumps({topic: ending}))
          .load())
    return sorted((r["partition"], r["offset"]) for r in df.select("partition", "offset").collect())


def batch_by_timestamp(spark: Any, bootstrap: str, topic: str, ts_ms: int) -> list[tuple[int, int, int]]:
    from pyspark.sql import functions as F

    df = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic)
          .option("startingTimestamp", str(ts_ms))
          .option("endingOffsets", "latest")
          .load())
    rows = df.select("partition", "offset", F.unix_millis("timestamp").alias("ts")).collect()
    return sorted((r["partition"], r["offset"], r["ts"]) for r in rows)


def write_transactions(bootstrap: str, topic: str, partitions: int, outcomes: list[str],
                       per_partition: int, transactional_id: str) -> Any:
    """One transaction per entry of ``outcomes`` ("commit", "abort" or "open"), each with
    ``per_partition`` records on every partition, value ``t<n>-p<partition>-<i>``. Aborted
    transactions are flushed first, so their records are in the log. An "open" one (only
    last) is flushed and left running: the returned producer aborts or commits it later."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "linger.ms": 5})
    producer.init_transactions(30)
    for n, outcome in enumerate(outcomes, start=1):
        producer.begin_transaction()
        for p in range(partitions):
            for i in range(per_partition):
                producer.produce(topic, key=f"k{i}".encode(), value=f"t{n}-p{p}-{i}".encode(),
                                 partition=p, headers=[("txn", str(n).encode())])
        remaining = producer.flush(30)
        if remaining:
            raise RuntimeError(f"transaction {n}: {remaining} records not delivered")
        if outcome == "commit":
            producer.commit_transaction(30)
        elif outcome == "abort":
            producer.abort_transaction(30)
        elif n != len(outcomes):
            raise ValueError("only the last transaction can stay open")
    return producer


def batch_by_isolation(spark: Any, bootstrap: str, topic: str, level: str) -> list[dict[str, Any]]:
    """Batch read earliest..latest with ``kafka.isolation.level`` = ``level`` (latest is the
    last stable offset under read_committed, the high watermark under read_uncommitted)."""
    df = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic)
          .option("kafka.isolation.level", level)
          .option("startingOffsets", "earliest")
          .option("endingOffsets", "latest")
          .load())
    rows = df.selectExpr("partition", "offset", "CAST(value AS STRING) AS value").collect()
    return sorted(({"partition": r["partition"], "offset": r["offset"], "value": r["value"]}
                   for r in rows), key=lambda r: (r["partition"], r["offset"]))


def read_parquet_windows(spark: Any, work: Path) -> list[dict[str, Any]]:
    path = work / "parquet" / "windows"
    if not path.exists():
        return []
    return [r.asDict() for r in spark.read.parquet(str(path)).collect()]
