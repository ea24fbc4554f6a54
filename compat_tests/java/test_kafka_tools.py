"""Apache Kafka's own test tools (kafka-tools jar, same version as the reference broker)
in short runs against a kcompat broker process."""

from __future__ import annotations

import json
import re

from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from compat_tests._broker import Broker
from compat_tests.java.conftest import run_java

TOOLS = "org.apache.kafka.tools"


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
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
                    "--producer-props", f"bootstrap.servers={bootstrap}", "linger.ms=5",
                    heap="512m")
    assert prod.returncode == 0, prod.explain()
    final = [ln for ln in prod.stdout.splitlines() if "records sent" in ln][-1]
    m = re.match(r"(\d+) records sent, ([\d.]+) records/sec", final)
    assert m and int(m.group(1)) == n, prod.explain()
    print("ProducerPerformance:", final)
    assert _end_total(bootstrap, topic, 2) == n

    cons = run_java(reference_cp, f"{TOOLS}.ConsumerPerformance", "--bootstrap-server", bootstrap,
                    "--topic", topic, "--messages", str(n), "--timeout", "30000",
                    "--group", f"perf-{topic}", heap="512m")
    assert cons.returncode == 0, cons.explain()
    lines = [ln for ln in cons.stdout.splitlines() if ln.strip()]
    header = [h.strip() for h in lines[0].split(",")]
    values = [v.strip() for v in lines[-1].split(",")]
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
