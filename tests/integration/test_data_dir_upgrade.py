"""A data directory written by a single-node broker from before it ran as a
Raft quorum of one (commit a19fc83) opens unchanged.

``fixtures/single_node_data_a19fc83.tar.gz`` was written by that broker
through confluent-kafka: topic ``orders`` (3 partitions, 10 records each from
an idempotent producer), group ``g1`` committed 7/8/9, a transactional
producer ``tx-1`` committed 5 records to ``other`` together with group
``g2``'s offset 4 on ``orders-0``. Its metadata log has no replica
assignments, no broker registrations and producer-id blocks; its partitions
have no Raft hard state. The new broker must serve all of it, keep the old
offsets, hand out producer ids that do not collide with the old ones, and
write new data that survives the next restart.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

from compat_tests._broker import Broker

FIXTURE = Path(__file__).parent / "fixtures" / "single_node_data_a19fc83.tar.gz"

CLIENT = textwrap.dedent("""
    import json, sys
    from confluent_kafka import Consumer, Producer, TopicPartition
    bs, phase = sys.argv[1], sys.argv[2]
    out = {}
    for group, parts in (("g1", [0, 1, 2]), ("g2", [0])):
        c = Consumer({"bootstrap.servers": bs, "group.id": group})
        got = c.committed([TopicPartition("orders", p) for p in parts], timeout=20)
        out[group] = [tp.offset for tp in got]
        c.close()
    c = Consumer({"bootstrap.servers": bs, "group.id": "reader", "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    c.assign([TopicPartition("orders", p, 0) for p in range(3)] + [TopicPartition("other", 0, 0)])
    rows = []
    want = 37 if phase == "after" else 35
    while len(rows) < want:
        m = c.poll(10)
        if m is None:
            break
        if not m.error():
            rows.append([m.topic(), m.partition(), m.offset(), m.value().decode()])
    c.close()
    out["rows"] = sorted(rows)
    if phase == "first":
        delivered = []
        p = Producer({"bootstrap.servers": bs, "enable.idempotence": True})
        p.produce("orders", value=b"new", partition=0,
                  on_delivery=lambda e, m: delivered.append((str(e), m.offset())))
        p.flush(20)
        out["delivered"] = delivered
        t = Producer({"bootstrap.servers": bs, "transactional.id": "tx-1"})
        t.init_transactions(20)
        t.begin_transaction()
        t.produce("other", value=b"after")
        t.commit_transaction(20)
    print(json.dumps(out))
""")


def _client(broker: Broker, phase: str) -> dict:  # type: ignore[type-arg]
    result = subprocess.run([sys.executable, "-c", CLIENT, broker.bootstrap, phase],
                            capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_single_node_data_dir_from_before_the_quorum_of_one(tmp_path: Path) -> None:
    broker = Broker(tmp_path / "broker")
    broker.data_dir.mkdir(parents=True)
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(broker.data_dir, filter="data")
    broker.start()
    try:
        first = _client(broker, "first")
        old_rows = [["orders", i % 3, i // 3, f"v{i}"] for i in range(30)]
        old_rows += [["other", 0, i, f"committed{i}"] for i in range(5)]
        assert first["g1"] == [7, 8, 9] and first["g2"] == [4]
        assert first["rows"] == sorted(old_rows)
        # a new idempotent producer's id does not collide with the old ones: its
        # first batch is appended after the old records, not taken for a duplicate
        assert first["delivered"] == [["None", 10]]
        broker.stop()
        broker.restart()
        after = _client(broker, "after")
        assert after["g1"] == [7, 8, 9] and after["g2"] == [4]
        new_rows = [["orders", 0, 10, "new"], ["other", 0, 6, "after"]]
        assert after["rows"] == sorted(old_rows + new_rows)
    finally:
        broker.close()
