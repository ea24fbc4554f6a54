"""librdkafka reading a selective filtered view (one record in 5,000 kept)
with small fetch sizes sees no error event and reads every matching record
once: a view's Fetch answer never consists of empty rebuilt batches only
(``kcompat.broker.storage.views``), short of a record-less tail held back a while.
Before, most answers of such a view were empty batches only; librdkafka
doubled its partition fetch size at each and, once at 1 GiB, reported
MSG_SIZE_TOO_LARGE for each ("Message at offset N might be too large to
fetch"), as the soak of views showed."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer

from compat_tests._broker import Broker, unique_topic
from compat_tests.confluent._helpers import create_topic
from tests.integration._hole_reader import spawn, values_read

SOURCE_RECORDS = 50_000
MATCH_EVERY = 5_000  # one record in this many matches the view's filter
PER_BATCH = 10  # records per produced batch: 5,000 small batches
FETCH_BYTES = 65_536  # fetch.max.bytes and max.partition.fetch.bytes (64 KiB: 14 doublings)
PAD = b"." * 200


def test_librdkafka_reads_a_selective_view_without_an_error(
        broker: Broker, tmp_path: Path) -> None:
    source, view = unique_topic("viewsrc"), unique_topic("sparse")
    create_topic(broker.bootstrap, source, partitions=1)
    create_topic(broker.bootstrap, view, partitions=1,
                 config={"kc.view.of": source, "kc.view.filter": "m = 'y'"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                  "batch.num.messages": PER_BATCH, "log_level": 0})
    wanted = []
    for i in range(SOURCE_RECORDS):
        hit = i % MATCH_EVERY == MATCH_EVERY // 2
        value = b"%06d" % i
        if hit:
            wanted.append(value.decode())
        p.produce(source, value + PAD, partition=0, headers=[("m", b"y" if hit else b"n")])
        if i % 1000 == 999:
            p.poll(0)
    assert p.flush(60) == 0
    out = str(tmp_path / "reader.json")
    config = {"fetch.max.bytes": FETCH_BYTES, "max.partition.fetch.bytes": FETCH_BYTES,
              "message.max.bytes": FETCH_BYTES}
    reader = spawn(broker.bootstrap, view, len(wanted), out, 90, config)
    try:
        assert reader.wait(150) == 0
    finally:
        if reader.poll() is None:
            reader.kill()
    assert [v[:6] for v in values_read(out)] == wanted  # each once, in order, no error
