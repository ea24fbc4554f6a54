"""Java kafka-clients 4.x, in real JVM processes, against a kcompat broker process
and a 3-broker cluster (producer and group at replication factor 1, the transactional
copy at 3; the Admin scenario, which checks a single node's answers, on a single node
only).

Programs live in compat_tests/java/clients (built once by Maven, cached):
``Produce`` (a default KafkaProducer, hence idempotent with acks=all),
``GroupConsumer`` (a classic consumer-group member that commits) and
``AdminScenario`` (the Admin client, a producer and assign-style consumers).
"""

from __future__ import annotations

import struct
import subprocess
import time
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from compat_tests._broker import Broker
from compat_tests._deployment import SINGLE_AND_RF3, Deployment
from compat_tests.java.conftest import PKG, JsonLineProcess, java_cmd, run_java


def create_topic(bootstrap: str, name: str, partitions: int, replication: int = 1) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, replication)])
    finally:
        admin.close()


def stored_producer_ids(where: Deployment, topic: str, partition: int
                        ) -> list[tuple[int, int, int]]:
    """(producerId, producerEpoch, baseSequence) of every stored RecordBatch v2
    (on the partition's leader)."""
    out = []
    leader = where.leader_of(topic, partition)
    for path in sorted((leader.data_dir / f"{topic}-{partition}").glob("*.log")):
        data = path.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            (batch_len,) = struct.unpack_from(">i", data, pos + 8)
            if batch_len <= 0 or data[pos + 16] != 2:
                break
            pid, epoch, seq = struct.unpack_from(">qhi", data, pos + 43)
            out.append((pid, epoch, seq))
            pos += 12 + batch_len
    return out


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    c = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return {tp.partition: off for tp, off in c.end_offsets(tps).items()}
    finally:
        c.close()


def test_default_producer_is_idempotent_and_acks_every_record(
        pbroker: Deployment, topic: str, clients_cp: str) -> None:
    create_topic(pbroker.bootstrap, topic, 3, pbroker.replication)
    n = 300
    run = run_java(clients_cp, f"{PKG}.Produce", pbroker.bootstrap, topic, str(n))
    assert run.returncode == 0, run.explain()
    lines = run.json_lines()
    done = lines[-1]
    assert done["event"] == "done" and done["acked"] == n and done["errors"] == 0, run.explain()
    # Offsets per partition are exactly 0..k-1, in send order.
    total = 0
    for p, offsets in done["offsets"].items():
        assert offsets == list(range(len(offsets))), (p, offsets)
        total += len(offsets)
    assert total == n
    # The broker stored batches with a real producer id and sequences: idempotence was on.
    for p in range(3):
        ids = stored_producer_ids(pbroker, topic, p)
        if not done["offsets"].get(str(p)):
            continue
        assert ids, f"no batches stored for partition {p}"
        assert all(pid >= 0 and epoch >= 0 and seq >= 0 for pid, epoch, seq in ids), ids
        assert len({pid for pid, _, _ in ids}) == 1, ids
    # What the Java producer wrote reads back with keys and the header.
    consumer = KafkaConsumer(bootstrap_servers=pbroker.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=3000)
    consumer.assign([TopicPartition(topic, p) for p in range(3)])
    got = {}
    for rec in consumer:
        got[rec.key.decode()] = (rec.value.decode(), dict(rec.headers))
        if len(got) == n:
            break
    consumer.close()
    assert len(got) == n
    assert got["k7"] == ("value-7", {"seq": b"7"})


class _Member(JsonLineProcess):
    """One GroupConsumer JVM; its JSON lines are read on a thread into a queue."""

    def __init__(self, cp: str, bootstrap: str, topic: str, group: str, client_id: str) -> None:
        self.client_id = client_id
        self.assignment: list[int] = []
        self.records: list[tuple[int, int]] = []
        self.log: list[dict[str, Any]] = []
        super().__init__(subprocess.Popen(
            java_cmd(cp, f"{PKG}.GroupConsumer", bootstrap, topic, group, client_id),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))

    def drain(self) -> None:
        for ev in self.new_events():
            self.log.append(ev)
            if ev["event"] == "assigned":
                self.assignment = ev["all"]
            elif ev["event"] == "record":
                self.records.append((ev["partition"], ev["offset"]))

    def stop(self) -> int:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9

    def explain(self) -> str:
        return f"[{self.client_id}] events: {self.log[-20:]}\nstderr: {self.stderr[-2000:]}"


def test_consumer_group_of_three_splits_partitions_and_commits(
        pbroker: Deployment, topic: str, clients_cp: str) -> None:
    bootstrap = pbroker.bootstrap
    create_topic(bootstrap, topic, 6, pbroker.replication)
    group = f"g-{topic}"
    members = [_Member(clients_cp, bootstrap, topic, group, f"member-{i}") for i in range(3)]
    try:
        # Wait for one stable generation in which every member owns two partitions.
        deadline = time.monotonic() + 60
        while True:
            for m in members:
                m.drain()
            if all(len(m.assignment) == 2 for m in members) and \
                    sorted(p for m in members for p in m.assignment) == list(range(6)):
                break
            assert all(m.proc.poll() is None for m in members), \
                "\n".join(m.explain() for m in members)
            assert time.monotonic() < deadline, "no balanced assignment in 60s\n" + \
                "\n".join(m.explain() for m in members)
            time.sleep(0.1)
        owner = {p: m.client_id for m in members for p in m.assignment}
        n = 600
        run = run_java(clients_cp, f"{PKG}.Produce", bootstrap, topic, str(n))
        assert run.returncode == 0, run.explain()
        produced = run.json_lines()[-1]["offsets"]
        expected = {(int(p), o) for p, offs in produced.items() for o in offs}
        assert len(expected) == n
        deadline = time.monotonic() + 60
        while True:
            for m in members:
                m.drain()
            seen = [r for m in members for r in m.records]
            if len(set(seen)) >= n:
                break
            assert time.monotonic() < deadline, f"consumed {len(set(seen))}/{n} in 60s\n" + \
                "\n".join(m.explain() for m in members)
            time.sleep(0.1)
        # Each record exactly once, and by the member that owns its partition.
        assert sorted(seen) == sorted(expected)
        for m in members:
            assert all(owner[p] == m.client_id for p, _ in m.records), m.explain()
        # Wait for the last commit of each member before stopping it.
        time.sleep(0.5)
    finally:
        codes = [m.stop() for m in members]
    for m in members:
        m.drain()
    assert codes == [0, 0, 0], "\n".join(m.explain() for m in members)
    assert all(any(e["event"] == "closed" for e in m.log) for m in members)
    # Committed offsets are the end offsets, and the group is empty after the members left.
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        committed = admin.list_group_offsets({group: None})[group]
        ends = end_offsets(bootstrap, topic, 6)
        assert {tp.partition: om.offset for tp, om in committed.items()} == ends
        desc = admin.describe_groups([group])
        state = desc[group]["group_state"] if isinstance(desc, dict) else desc[0].state
        assert state == "Empty", desc
    finally:
        admin.close()


def test_admin_client_scenario(module_broker: Broker, clients_cp: str) -> None:
    """The Admin calls Spark and operators use, with their answers checked one by one."""
    run = run_java(clients_cp, f"{PKG}.AdminScenario", module_broker.bootstrap, "adm")
    assert run.returncode == 0, run.explain()
    obs = run.json_lines()[-1]["observations"]

    def err(step: str) -> str:
        v = obs[step]
        assert isinstance(v, dict) and "error" in v, (step, v)
        return v["exception"]

    assert obs["describe_cluster"] == {"nodes": [{"id": 1, "is_bootstrap": True, "rack": None}],
                                       "controller_is_a_node": True, "cluster_id_present": True}
    assert obs["create_main"] == "ok"
    assert err("create_existing") == "TopicExistsException"
    assert err("create_zero_partitions") == "InvalidPartitionsException"
    assert err("create_replication_factor_3") == "InvalidReplicationFactorException"
    assert err("create_bad_config_value") == "InvalidConfigurationException"
    assert err("create_bad_name") == "InvalidTopicException"
    assert obs["create_validate_only"] == "ok" and obs["validate_only_left_no_topic"] is False
    d = obs["describe_main"]
    assert d["name"] == "adm-main" and d["internal"] is False and d["topic_id_nonzero"] is True
    assert [(p["partition"], p["leader"], p["replicas"], p["isr"]) for p in d["partitions"]] == \
        [(i, 1, [1], [1]) for i in range(3)]
    assert err("describe_unknown") == "UnknownTopicOrPartitionException"
    assert obs["produce"] == {"p0": [[i, i * 1000] for i in range(5)],
                              "p1": [[i, i * 1000] for i in range(3)], "p2": []}
    lo = obs["list_offsets"]
    assert lo["p0"]["earliest"][0] == 0 and lo["p0"]["latest"][0] == 5
    assert lo["p0"]["ts_1500"][:2] == [2, 2000]            # first record at or after
    assert lo["p0"]["ts_exact_2000"][:2] == [2, 2000]
    assert lo["p0"]["ts_before_all"][:2] == [0, 0]
    assert lo["p0"]["ts_after_all"] == [-1, -1, "absent"]  # none found
    assert lo["p0"]["max_timestamp"][:2] == [4, 4000]
    assert lo["p2"]["latest"][0] == 0 and lo["p2"]["ts_1500"] == [-1, -1, "absent"]
    assert err("list_offsets_unknown_topic") == "UnknownTopicOrPartitionException"
    assert len(obs["consume_all"]["records"]) == 8
    assert obs["consume_all"]["positions"] == {"p0": 5, "p1": 3, "p2": 0}
    assert err("fetch_out_of_range") == "OffsetOutOfRangeException"
    assert obs["fetch_at_end_is_empty"] == {"records": 0, "position": 5}
    assert err("produce_oversized") == "RecordTooLargeException"
    assert err("create_partitions_fewer") == "InvalidPartitionsException"
    assert obs["create_partitions_more"] == 4
    cfg = obs["describe_configs_topic"]
    assert cfg["retention.ms"]["value"] == "3600000"
    assert cfg["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert cfg["cleanup.policy"]["value"] == "delete" and cfg["cleanup.policy"]["type"] == "LIST"
    assert obs["describe_configs_broker"]["num.partitions"]["value"] == "1"
    assert err("describe_configs_unknown_topic") == "UnknownTopicOrPartitionException"
    assert err("delete_unknown") == "UnknownTopicOrPartitionException"
    assert obs["delete_main"] == "ok"
    assert err("describe_after_delete") == "UnknownTopicOrPartitionException"




def _produce_values(bootstrap: str, topic: str, partitions: int, n: int) -> list[str]:
    """n plain (non-transactional) records spread over the partitions; returns the values."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    values = [f"v-{i}" for i in range(n)]
    futures = [producer.send(topic, key=f"k{i}".encode(), value=v.encode(), partition=i % partitions)
               for i, v in enumerate(values)]
    producer.flush()
    for f in futures:
        f.get(timeout=30)
    producer.close()
    return values


def _read_all(bootstrap: str, topic: str, partitions: int, level: str) -> list[tuple[str, int]]:
    """(value, txn header) of every record of the topic, read with kafka-python at ``level``."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                      isolation_level=level, enable_auto_commit=False, consumer_timeout_ms=3000)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    c.assign(tps)
    ends = c.end_offsets(tps)
    out = []
    for rec in c:
        out.append((rec.value.decode(), int(dict(rec.headers)["txn"])))
        if all(c.position(tp) >= ends[tp] for tp in tps):
            break
    c.close()
    return out


@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)
def test_transactional_copy_is_exactly_once_under_read_committed(
        pbroker: Deployment, topic: str, clients_cp: str) -> None:
    """KafkaProducer(transactional.id) + read_committed KafkaConsumer in a group:
    consume-transform-produce with sendOffsetsToTransaction(offsets, groupMetadata()),
    every 4th transaction aborted on purpose after flush(). The output has each input
    record exactly once under read_committed; the aborted copies are in the log (visible
    read_uncommitted) but never committed; the group's offsets are the input's end."""
    bootstrap = pbroker.bootstrap
    in_topic, out_topic = f"{topic}-in", f"{topic}-out"
    create_topic(bootstrap, in_topic, 3, pbroker.replication)
    create_topic(bootstrap, out_topic, 3, pbroker.replication)
    n = 3000
    values = _produce_values(bootstrap, in_topic, 3, n)
    group = f"g-{topic}"
    run = run_java(clients_cp, f"{PKG}.TxnCopy", bootstrap, in_topic, out_topic, group,
                   f"txn-{topic}", "200", "4", timeout=150)
    assert run.returncode == 0, run.explain()
    ev = run.json_lines()
    assigned = next(e for e in ev if e["event"] == "assigned")
    assert assigned["partitions"] == [0, 1, 2] and assigned["generation"] >= 1, assigned
    assert assigned["member_id_present"] is True
    commits = [e for e in ev if e["event"] == "commit"]
    aborts = [e for e in ev if e["event"] == "abort"]
    copied = next(e for e in ev if e["event"] == "copied")
    assert len(aborts) >= 2 and len(commits) >= 6, (len(commits), len(aborts))
    assert copied["records"] == n and sum(c["records"] for c in commits) == n
    assert copied["committed"] == {"0": 1000, "1": 1000, "2": 1000}
    committed_txns = {c["txn"] for c in commits}
    aborted_txns = {a["txn"] for a in aborts}
    # Every abort rewound to the offsets of the last committed transaction.
    last: dict[str, int] = {"0": 0, "1": 0, "2": 0}
    for e in ev:
        if e["event"] == "commit":
            last = e["offsets"]
        elif e["event"] == "rewind":
            assert e["positions"] == last, (e, last)

    # What the Java read_committed / read_uncommitted consumers saw.
    levels = next(e for e in ev if e["event"] == "verify")["levels"]
    rc, ru = levels["read_committed"], levels["read_uncommitted"]
    assert sorted(rc["values"]) == sorted(values), \
        f"read_committed: {len(rc['values'])} records, {len(set(rc['values']))} distinct"
    assert set(rc["txns"]) == committed_txns
    assert set(ru["txns"]) == committed_txns | aborted_txns  # the aborted records were written
    assert len(ru["values"]) == n + sum(a["records"] for a in aborts)
    # LSO = high watermark once every transaction is finished; the positions include the markers.
    assert rc["ends"] == ru["ends"] == rc["positions"] == ru["positions"]

    # The same from kafka-python.
    got = _read_all(bootstrap, out_topic, 3, "read_committed")
    assert sorted(v for v, _ in got) == sorted(values)
    assert not {t for _, t in got} & aborted_txns
    # Committed group offsets = input end offsets.
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        offs = admin.list_group_offsets({group: None})[group]
    finally:
        admin.close()
    assert {tp.partition: om.offset for tp, om in offs.items()} == \
        end_offsets(bootstrap, in_topic, 3)
