"""Apache Kafka's own log dump tool (DumpLogSegments, kafka-tools 4.4) reads the
KRaftVoters control batch kcompat writes for a Raft configuration entry
(``kcompat.broker.replication.voters_record``) as a VotersRecord with the
voter ids the entry named, and the LeaderChange batch of a new leader's term
as a LeaderChangeMessage naming the leader, between ordinary batches it
prints as data."""

from __future__ import annotations

import json
import time
from pathlib import Path

from compat_tests.java.conftest import run_java
from kcompat.broker.replication.storage import PartitionLogStorage
from kcompat.log.config import LogConfig
from kcompat.log.partition_log import PartitionLog
from kcompat.raft import Entry
from kcompat.wire.records import encode_batch


def test_dump_log_segments_reads_the_voters_batch(tmp_path: Path, reference_cp: str) -> None:
    now = int(time.time() * 1000)
    storage = PartitionLogStorage(PartitionLog.open(tmp_path / "t-0", LogConfig(), now), 1)
    storage.append([
        Entry(0, 3, encode_batch([(None, b"before", (), now)]), 1),
        Entry(1, 3, b"", 1, control=True, voters=frozenset({1, 2, 4})),
        Entry(2, 3, encode_batch([(None, b"after", (), now)]), 1),
        Entry(3, 4, b"", 1, control=True),  # node 1 leads term 4
    ])
    storage.plog.close()
    segments = sorted((tmp_path / "t-0").glob("*.log"))
    run = run_java(reference_cp, "org.apache.kafka.tools.DumpLogSegments", "--files",
                   ",".join(str(s) for s in segments), "--print-data-log")
    assert run.returncode == 0 and "Exception" not in run.stdout + run.stderr, run.explain()
    lines = run.stdout.splitlines()
    voters_lines = [ln for ln in lines if "KRaftVoters" in ln]
    assert len(voters_lines) == 1, run.stdout
    record = json.loads(voters_lines[0].split("KRaftVoters ", 1)[1])
    assert record["version"] == 0
    assert [v["voterId"] for v in record["voters"]] == [1, 2, 4]
    assert all(v["kRaftVersionFeature"] == {"minSupportedVersion": 0, "maxSupportedVersion": 1}
               for v in record["voters"])
    headers = [ln for ln in lines if ln.startswith("baseOffset:")]
    assert [("isControl: true" in h, h.split()[1]) for h in headers] == [
        (False, "0"), (True, "1"), (False, "2"), (True, "3")], run.stdout
    [change] = [ln for ln in lines if "LeaderChange" in ln]
    assert json.loads(change.split("LeaderChange: ", 1)[1])["leaderId"] == 1, change
    assert "payload: before" in run.stdout and "payload: after" in run.stdout
