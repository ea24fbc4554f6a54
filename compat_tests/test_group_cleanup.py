"""Empty groups without offsets are deleted, as Kafka's coordinator deletes them.

Every ``offsets.retention.check.interval.ms`` (10 minutes by default; 500 ms
here) Kafka's group coordinator expires offsets, then deletes each group left
with no members and no offsets — a classic group or a KIP-848 consumer group,
never a share group. The same scenario runs on a kcompat node, a 3-broker
kcompat cluster at replication factor 3 and Apache Kafka 4.4.0 (the
differential: the groups left must be the same), with unmodified clients in
this process: kafka-python's consumer (classic protocol) and admin,
confluent-kafka's consumer with ``group.protocol=consumer`` and its
ShareConsumer (``compat_tests._share_member``, a process of its own):

- a classic group that joined and left without committing: deleted;
- a classic group that committed an offset: kept (its offsets keep it);
- a KIP-848 group that joined and left without committing: deleted;
- a KIP-848 group with a member still in it: kept;
- a share group whose member read a record and left: kept.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from ._broker import Broker, unique_topic
from ._cluster import Cluster
from ._deployment import CLUSTER_BROKER_ARGS, Deployment
from ._group_member import kafka_python_learn_topics
from ._groups import create_topic, unique_group, wait_for
from ._share import ShareMember, produce, require_share_apis, set_group_configs, stop_all
from .java.kafka_reference import KafkaReference

pytestmark = pytest.mark.timeout(240)

SWEEP = {"offsets.retention.check.interval.ms": "500"}
SWEEP_ARGS = tuple(a for k, v in SWEEP.items() for a in ("--set", f"{k}={v}"))


@pytest.fixture(scope="module", params=("single", "rf3", "kafka"))
def bootstrap(request: pytest.FixtureRequest,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """A broker sweeping every 500 ms, and the replication factor of its topics."""
    root = tmp_path_factory.mktemp(f"group-cleanup-{request.param}")
    if request.param == "kafka":
        kafka = KafkaReference(root, overrides=SWEEP).start()
        try:
            yield kafka.bootstrap, 1
        finally:
            kafka.close()
    elif request.param == "single":
        broker = Broker(root, extra_args=(*CLUSTER_BROKER_ARGS, *SWEEP_ARGS)).start()
        try:
            yield broker.bootstrap, 1
        finally:
            broker.close()
    else:
        cluster = Cluster(root, extra_args=(*CLUSTER_BROKER_ARGS, *Deployment.cluster_args("rf3"),
                                            *SWEEP_ARGS)).start()
        try:
            yield ",".join(b.bootstrap for b in cluster.brokers.values()), 3
        finally:
            cluster.close()


def _classic(bootstrap: str, topic: str, group: str, commit: bool) -> None:
    """A kafka-python member joins ``group``, reads, commits if asked, leaves."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             consumer_timeout_ms=500)
    try:
        consumer.subscribe([topic])
        # a kafka-python 3.0.12 leader that rejoins for metadata can orphan that
        # rebalance, on Kafka as on kcompat (kafka_python/FINDINGS.md)
        kafka_python_learn_topics(consumer, [topic])
        wait_for(lambda: consumer.poll(200) is not None and consumer.assignment(), 60.0,
                 f"{group}: no assignment")
        if commit:
            consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(1, "", -1)})
    finally:
        consumer.close()


def _consumer_protocol(bootstrap: str, topic: str, group: str) -> Consumer:
    """A confluent-kafka member of KIP-848 group ``group``, assigned (the caller closes it)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "group.protocol": "consumer", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    wait_for(lambda: consumer.poll(0.2) is not None or consumer.assignment(), 60.0,
             f"{group}: no assignment")
    return consumer


def _listed(bootstrap: str) -> set[str]:
    """The groups of every type ListGroups (v5, KIP-848's types filter) lists."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return {g["group_id"] for g in admin.list_groups(
            types_filter=["classic", "consumer", "share"])}
    finally:
        admin.close()


def test_empty_groups_without_offsets_are_deleted(bootstrap: tuple[str, int],
                                                  tmp_path: Path) -> None:
    servers, replication = bootstrap
    topic = unique_topic("cleanup")
    create_topic(servers, topic, 1, replication)
    produce(servers, topic, [(0, "k", "1")])  # ACCEPTed by the share member
    left, committed, left_848, staying_848, share = (
        unique_group(p) for p in ("left", "committed", "left848", "staying848", "share"))
    _classic(servers, topic, left, commit=False)
    _classic(servers, topic, committed, commit=True)
    _consumer_protocol(servers, topic, left_848).close()
    staying = _consumer_protocol(servers, topic, staying_848)
    try:
        require_share_apis(servers)
        set_group_configs(servers, share, {"share.auto.offset.reset": "earliest"})
        member = ShareMember(servers, topic, share, tmp_path / "share.log", "m")
        try:
            wait_for(member.deliveries, 60.0, lambda: f"no share delivery: {member.describe()}")
        finally:
            stop_all([member])
        # the groups that stay are listed, the others go at a sweep; then a few more
        # sweeps, so that a group wrongly deleted later is seen too
        kept = {committed, staying_848, share}
        wait_for(lambda: not _listed(servers) & {left, left_848}, 30.0,
                 lambda: f"not deleted: {_listed(servers) & {left, left_848}}")
        time.sleep(2.0)
        staying.poll(0.1)  # a heartbeat: the member stays in its group
        found = _listed(servers)
        assert kept <= found, f"deleted: {kept - found}"
        assert not found & {left, left_848}, found
    finally:
        staying.close()
