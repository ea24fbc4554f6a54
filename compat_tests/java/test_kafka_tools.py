"""Apache Kafka's own test tools (kafka-tools jar, same version as the reference broker)
in short runs against a kcompat broker process, and (the TransactionalMessageCopier in
``group`` mode) a 3-broker cluster at replication factor 3 (the Java clients suite
runs producer, group and transactional copy in the clusters too)."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from compat_tests._broker import Broker
from compat_tests._deployment import Deployment
from compat_tests.java.conftest import run_java

TOOLS = "org.apache.kafka.tools"


def _create(bootstrap: str, topic: str, partitions: int, replication: int = 1) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, replication)])
    finally:
        admin.close()


def _end_total(bootstrap: str, topic: str, partitions: int) -> int:
    c = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        return sum(c.end_offsets([TopicPartition(topic, p) for p in range(partitions)]).values())
    finally:
        c.close()


def test_producer_then_consumer_performance(module_broker: Broker, topic: str,
                                            reference_cp: str) -> None:
    bootstrap = module_broker.bootstrap
    _create(bootstrap, topic, 2)
    n = 20000
    prod = run_java(reference_cp, f"{TOOLS}.ProducerPerformance", "--topic", topic,
                    "--num-records", str(n), "--record-size", "100", "--throughput", "-1",
                    "--command-property", f"bootstrap.servers={bootstrap}", "linger.ms=5",
                    heap="512m")
    assert prod.returncode == 0, prod.explain()
    final = [ln for ln in prod.stdout.splitlines() if "records sent" in ln][-1]
    m = re.match(r"(\d+) records sent, ([\d.]+) records/sec", final)
    assert m and int(m.group(1)) == n, prod.explain()
    print("ProducerPerformance:", final)
    assert _end_total(bootstrap, topic, 2) == n

    cons = run_java(reference_cp, f"{TOOLS}.ConsumerPerformance", "--bootstrap-server", bootstrap,
                    "--topic", topic, "--num-records", str(n), "--timeout", "30000",
                    "--group", f"perf-{topic}", heap="512m")
    assert cons.returncode == 0, cons.explain()
    lines = [ln for ln in cons.stdout.splitlines() if ln.strip()]
    head = next(i for i, ln in enumerate(lines) if ln.startswith("start.time"))  # after warnings
    header = [h.strip() for h in lines[head].split(",")]
    values = [v.strip() for v in lines[head + 1].split(",")]
    row = dict(zip(header, values, strict=False))
    print("ConsumerPerformance:", row)
    assert int(row["data.consumed.in.nMsg"]) == n, cons.explain()
    assert float(row["data.consumed.in.MB"]) > 1.9


def test_verifiable_producer_and_consumer(module_broker: Broker, topic: str,
                                          reference_cp: str) -> None:
    """Every record the VerifiableProducer saw acknowledged is consumed by the
    VerifiableConsumer (a group member that commits), at the acknowledged offset."""
    bootstrap = module_broker.bootstrap
    _create(bootstrap, topic, 3)
    n = 2000
    prod = run_java(reference_cp, f"{TOOLS}.VerifiableProducer", "--bootstrap-server", bootstrap,
                    "--topic", topic, "--max-messages", str(n), "--throughput", "-1",
                    "--acks", "-1", "--repeating-keys", "50")
    assert prod.returncode == 0, prod.explain()
    events = [json.loads(ln) for ln in prod.stdout.splitlines() if ln.startswith("{")]
    acked = {(e["partition"], e["offset"]): e["value"] for e in events
             if e["name"] == "producer_send_success"}
    failed = [e for e in events if e["name"] == "producer_send_error"]
    tool = [e for e in events if e["name"] == "tool_data"][-1]
    assert not failed, failed[:5]
    assert len(acked) == n and tool["acked"] == n and tool["sent"] == n, tool

    cons = run_java(reference_cp, f"{TOOLS}.VerifiableConsumer", "--bootstrap-server", bootstrap,
                    "--topic", topic, "--group-id", f"verify-{topic}", "--max-messages", str(n),
                    "--reset-policy", "earliest", "--verbose", timeout=90)
    assert cons.returncode == 0, cons.explain()
    cevents = [json.loads(ln) for ln in cons.stdout.splitlines() if ln.startswith("{")]
    consumed = {(e["partition"], e["offset"]): e["value"] for e in cevents
                if e["name"] == "record_data"}
    missing = set(acked) - set(consumed)
    assert not missing, f"{len(missing)} acknowledged records not consumed, e.g. {sorted(missing)[:5]}"
    assert all(consumed[k] == v for k, v in acked.items())
    commits = [e for e in cevents if e["name"] == "offsets_committed"]
    assert commits and all(e["success"] for e in commits), commits[-3:]
    assigned = [e for e in cevents if e["name"] == "partitions_assigned"]
    assert assigned and sorted(p["partition"] for p in assigned[-1]["partitions"]) == [0, 1, 2]


def _produce_values(bootstrap: str, topic: str, per_partition: dict[int, int]) -> dict[int, list[str]]:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    values = {p: [f"p{p}-v{i}" for i in range(n)] for p, n in per_partition.items()}
    futures = [producer.send(topic, key=v.encode(), value=v.encode(), partition=p)
               for p, vs in values.items() for v in vs]
    producer.flush()
    for f in futures:
        f.get(timeout=30)
    producer.close()
    return values


def _read_all(bootstrap: str, topic: str, partitions: int, level: str) -> list[tuple[int, str]]:
    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                      isolation_level=level, enable_auto_commit=False,
                      consumer_timeout_ms=3000)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    c.assign(tps)
    ends = c.end_offsets(tps)
    out = []
    if any(ends.values()):
        for rec in c:
            out.append((rec.partition, rec.value.decode()))
            if all(c.position(tp) >= ends[tp] for tp in tps):
                break
    c.close()
    return out


@pytest.mark.parametrize(("pbroker", "mode"), [("single", "assign"), ("rf3", "group")],
                         indirect=["pbroker"])
def test_transactional_message_copier(pbroker: Deployment, topic: str, reference_cp: str,
                                      mode: str) -> None:
    """Kafka's TransactionalMessageCopier (the system tests' exactly-once copier) with
    random aborts and sendOffsetsToTransaction(offsets, groupMetadata): in ``assign`` mode
    one copier per input partition, both running at once and sharing a consumer group; in
    ``group`` mode one copier subscribing to the whole input topic. A read_committed
    consumer then finds every input record exactly once in the output topic."""
    bootstrap = pbroker.bootstrap
    in_topic, out_topic = f"{topic}-in", f"{topic}-out"
    _create(bootstrap, in_topic, 2, pbroker.replication)
    _create(bootstrap, out_topic, 2, pbroker.replication)
    per_partition = {0: 1500, 1: 1000}
    n = sum(per_partition.values())
    values = _produce_values(bootstrap, in_topic, per_partition)
    group = f"copier-{topic}"
    common = ["--input-topic", in_topic, "--output-topic", out_topic, "--broker-list", bootstrap,
              "--consumer-group", group, "--transaction-size", "100", "--enable-random-aborts",
              "--use-group-metadata"]
    if mode == "assign":
        cmds = [[*common, "--input-partition", str(p), "--max-messages", str(count),
                 "--transactional-id", f"copier-{topic}-{p}"] for p, count in per_partition.items()]
    else:
        cmds = [[*common, "--group-mode", "--input-partition", "0",
                 "--transactional-id", f"copier-{topic}"]]
    with ThreadPoolExecutor(len(cmds)) as pool:
        runs = list(pool.map(lambda args: run_java(
            reference_cp, f"{TOOLS}.TransactionalMessageCopier", *args, timeout=120), cmds))
    processed = 0
    for run in runs:
        assert run.returncode == 0, run.explain()
        status = [json.loads(ln) for ln in run.stdout.splitlines() if ln.startswith("{")]
        final = status[-1]
        # kafka-tools 4.1: {"transactionalId", "stage", "totalProcessed", "consumed", "remaining"}
        assert final["stage"] == "ShutdownComplete" and final["remaining"] <= 0, run.explain()
        loops = [s for s in status if s.get("stage") == "ProcessLoop"]
        assert loops and loops[-1]["remaining"] > 0  # the last loop before the final commit
        processed += final["totalProcessed"]
        print(f"TransactionalMessageCopier ({mode}):", final)
    assert processed == n
    got = _read_all(bootstrap, out_topic, 2, "read_committed")
    expected = sorted((p, v) for p, vs in values.items() for v in vs)
    assert len(got) == n and sorted(got) == expected, \
        f"read_committed output: {len(got)} records, {len(set(got))} distinct, expected {n}"
    # About a third of the transactions were aborted at random (after their sends): the
    # log holds their records too, read_uncommitted shows them as duplicates.
    uncommitted = _read_all(bootstrap, out_topic, 2, "read_uncommitted")
    assert len(uncommitted) > n and set(uncommitted) == set(expected)
    print(f"read_committed {len(got)}, read_uncommitted {len(uncommitted)} records")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        offs = admin.list_group_offsets({group: None})[group]
    finally:
        admin.close()
    assert {tp.partition: om.offset for tp, om in offs.items()} == per_partition
