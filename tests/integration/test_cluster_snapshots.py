"""Metadata log snapshots in a real 3-broker cluster (issue 6, Raft §7).

With a tiny ``metadata.log.max.record.bytes.between.snapshots`` every broker
checkpoints its metadata image and drops the log prefix. A broker killed while
topics are created, deleted, grown and reconfigured comes back behind the
leader's log start, so it can only catch up by installing the leader's
snapshot (FetchSnapshot); afterwards it must describe exactly the cluster the
others do, and host the replicas assigned to it. A full restart must rebuild
every broker from its own checkpoint plus the log tail.
"""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions

from compat_tests._broker import unique_topic
from compat_tests._cluster import Cluster

SNAPSHOT_BYTES = 1024
METADATA_DIR = "__cluster_metadata-0"


def _checkpoints(cluster: Cluster, node: int) -> list[int]:
    """Offsets of the metadata checkpoints in a broker's data directory."""
    directory = cluster.brokers[node].data_dir / METADATA_DIR
    return sorted(int(p.name.split("-")[0]) for p in directory.glob("*.checkpoint"))


def _view(bootstrap: str) -> dict[str, int]:
    """{topic: partition count} as one broker describes the cluster (no internal topics)."""
    md = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=10)
    return {name: len(t.partitions) for name, t in md.topics.items()
            if not name.startswith("__") and t.error is None}


def _wait_view(bootstrap: str, expected: dict[str, int], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    seen: dict[str, int] = {}
    while time.monotonic() < deadline:
        try:
            seen = _view(bootstrap)
        except Exception:  # noqa: BLE001 - broker still starting: keep polling
            seen = {}
        if seen == expected:
            return
        time.sleep(0.3)
    raise AssertionError(f"{bootstrap} describes {seen}, expected {expected}")


def _config(bootstrap: str, topic: str, key: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    return str(configs[key].value)


def _wait_in_isr(cluster: Cluster, topic: str, node: int, timeout_s: float = 30.0) -> None:
    """Every partition of ``topic`` that ``node`` replicates lists it in the ISR."""
    deadline = time.monotonic() + timeout_s
    missing: list[int] = []
    while time.monotonic() < deadline:
        md = cluster._admin().list_topics(topic, timeout=5)
        parts = md.topics[topic].partitions.values()
        missing = [p.id for p in parts if node in p.replicas and node not in p.isrs]
        if not missing and parts:
            return
        time.sleep(0.3)
    raise AssertionError(f"node {node} not in the ISR of {topic} partitions {missing}")


def test_lagging_broker_installs_the_snapshot_and_full_restart_loads_checkpoints(
        tmp_path: Path) -> None:
    c = Cluster(tmp_path, extra_args=(
        "--set", f"metadata.log.max.record.bytes.between.snapshots={SNAPSHOT_BYTES}",
        "--set", "broker.session.timeout.ms=2000", "--set", "broker.heartbeat.interval.ms=500"))
    try:
        c.start()
        expected: dict[str, int] = {}
        first = [unique_topic("snap") for _ in range(6)]
        for name in first:
            c.create_topic(name, 2, 3)
            expected[name] = 2
        controller = c.wait_for_controller()
        lagging = next(n for n in c.brokers if n != controller)
        assert _checkpoints(c, controller), "the controller never snapshotted its metadata"

        c.brokers[lagging].kill()
        admin = c._admin()
        deadline = time.monotonic() + 20
        while sorted(admin.list_topics(timeout=5).brokers) != sorted(set(c.brokers) - {lagging}):
            assert time.monotonic() < deadline, "the killed broker was never fenced"
            time.sleep(0.2)
        # New replicas go to the two live brokers only.
        later = [unique_topic("late") for _ in range(6)]
        for name in later:
            c.create_topic(name, 3, 2)
            expected[name] = 3
        for name in first[:2]:
            admin.delete_topics([name], operation_timeout=20)[name].result(timeout=30)
            del expected[name]
        grown = later[0]  # replication factor 2: placeable on the two live brokers
        admin.create_partitions([NewPartitions(grown, 5)])[grown].result(timeout=30)
        expected[grown] = 5
        altered = first[3]
        resource = ConfigResource(ConfigResource.Type.TOPIC, altered,
                                  set_config={"retention.ms": "123456"})
        admin.alter_configs([resource])[resource].result(timeout=30)
        live = [n for n in c.brokers if n != lagging]
        _wait_view(c.brokers[live[0]].bootstrap, expected)
        assert max(_checkpoints(c, n)[-1] for n in live) > max(_checkpoints(c, lagging) or [0])

        before = c.brokers[lagging].log_size()
        c.brokers[lagging].start()
        _wait_view(c.brokers[lagging].bootstrap, expected)
        assert _config(c.brokers[lagging].bootstrap, altered, "retention.ms") == "123456"
        log_text = c.brokers[lagging].log_path.read_bytes()[before:].decode(errors="replace")
        assert "installed the leader's metadata snapshot" in log_text, (
            "caught up without the leader's snapshot")
        # Its replicas of the surviving topics are hosted and caught up; those of
        # the topics deleted while it was away (known only from the snapshot) are gone.
        for name in first[2:]:
            _wait_in_isr(c, name, lagging)
        for name in first[:2]:
            assert not list(c.brokers[lagging].data_dir.glob(f"{name}-*")), name

        for broker in c.brokers.values():
            broker.kill()
        for broker in c.brokers.values():
            broker.start()
        c.wait_for_controller()
        for broker in c.brokers.values():
            _wait_view(broker.bootstrap, expected)
    finally:
        c.close()
