"""Delivery batches of delayed records stay ordinary batches in size: due
records of one partition are delivered in batches of about 1 MiB (at least
one record), not all at once."""

from __future__ import annotations

import time
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer

from compat_tests._broker import Broker, unique_topic
from kcompat.ext.schedule_log import INTERNAL_PRODUCER_BASE
from tests.chaos.test_delayed_delivery_chaos import batches_on_disk

RECORD_BYTES = 400_000
RECORDS = 5


def test_large_delayed_records_are_delivered_in_batches_of_about_1_mib(tmp_path: Path) -> None:
    broker = Broker(tmp_path / "broker", extra_args=("--set", "admin.port=-1")).start()
    try:
        topic = unique_topic("bigdelay")
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, max_request_size=2 << 20)
        due = b"%d" % (time.time() * 1000 + 2000)  # all due at once
        for i in range(RECORDS):
            producer.send(topic, b"%d" % i * RECORD_BYTES, key=b"k%d" % i, partition=0,
                          headers=[("kc-deliver-at", due)])
        producer.flush()
        producer.close()
        consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap,
                                 auto_offset_reset="earliest", fetch_max_bytes=8 << 20,
                                 max_partition_fetch_bytes=8 << 20)
        got = []
        deadline = time.monotonic() + 30
        while len(got) < RECORDS and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got += records
        consumer.close()
        assert sorted(r.key for r in got) == [b"k%d" % i for i in range(RECORDS)]
        assert all(len(r.value) == RECORD_BYTES for r in got)
        deliveries = [h.records_count for h, _view in batches_on_disk(broker.data_dir, topic, 0)
                      if h.producer_id >= INTERNAL_PRODUCER_BASE]
        assert sum(deliveries) == RECORDS
        assert max(deliveries) == 2, deliveries  # 2 x 400 kB fit 1 MiB, a third does not
    finally:
        broker.close()
