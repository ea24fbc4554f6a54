"""Brokers beyond the voters (issue 19 item 1): a broker-only node
(``process.roles=broker``, KRaft's role) joins a running 3-voter cluster at
run time without a restart of the others — it follows the metadata log as an
observer of the metadata quorum, registers with the controller, gets peer
links from every broker, and hosts partitions like any broker; DescribeQuorum
(kafka-python's admin client) lists it as an observer of the metadata quorum.

Real processes: 3 combined brokers (voters), then broker 4 started with only
``controller.quorum.voters`` naming them. Broker 4 appears in Metadata;
a topic of replication factor 4 (more than the voters) is placed on all four;
a topic whose partitions are assigned to broker 4 first gets broker 4 as
leader; confluent-kafka produces idempotently through broker 4 alone and reads
every record back through broker 1. Broker 4 killed -9: its partitions fail
over and take writes; restarted, it catches up and is back in every ISR as
any broker describes it within the test's wait (a quiet partition announces
the ISR it goes quiet with; before, the others learnt it only from the full
announcement every 30 s). Last, the controller is killed -9: broker 4, an
observer, follows the new metadata leader and a CreateTopics sent to it is
forwarded there and the topic appears with a leader.
Bad configs exit with a clear error: a broker-only node without voters, a
voter that calls itself broker-only, a controller that is not a voter.
A controller-only node (``process.roles=controller``) votes in the metadata
quorum and hosts no partition."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from compat_tests._broker import Broker, unique_topic
from compat_tests._cluster import Cluster
from tests.integration import _elastic as el
from tests.integration._elastic import FAST_SESSIONS, TIMEOUT_S, broker_only, grown_cluster


@pytest.fixture
def grown(tmp_path: Path) -> Iterator[tuple[Cluster, Broker]]:
    with grown_cluster(tmp_path) as both:
        yield both


def _partitions(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    md = el.admin(bootstrap).list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return {}
    return {p.id: (p.leader, list(p.replicas), list(p.isrs)) for p in t.partitions.values()}


def _produce_one(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    producer.produce(topic, b"one", partition=0)
    assert producer.flush(TIMEOUT_S) == 0


def test_broker_only_node_joins_hosts_leads_and_rejoins_after_kill9(
        grown: tuple[Cluster, Broker]) -> None:
    cluster, fourth = grown
    one = cluster.brokers[1].bootstrap
    el.wait(lambda: 4 in el.admin(one).list_topics(timeout=10).brokers, "broker 4 in Metadata")
    admin = el.admin(one)  # alive until its futures resolve
    wide = unique_topic("four-wide")
    admin.create_topics([NewTopic(wide, 2, 4)], operation_timeout=20)[wide].result(30)
    el.wait(lambda: all(sorted(r) == [1, 2, 3, 4] and ldr >= 0
                      for ldr, r, _i in _partitions(one, wide).values())
          and len(_partitions(one, wide)) == 2, "RF 4 over the four brokers")

    quorum = el.quorum(one)  # Kafka's DescribeQuorum: 1-3 vote, 4 observes
    assert sorted(v["replica_id"] for v in quorum["current_voters"]) == [1, 2, 3], quorum
    [observer] = quorum["observers"]
    assert observer["replica_id"] == 4 and observer["log_end_offset"] > 0, quorum
    info = json.loads(subprocess.run(
        [sys.executable, "-m", "kcompat", "cluster", "info", "--json", "--bootstrap-server", one],
        capture_output=True, text=True, timeout=60, check=True).stdout)
    roles = {b["node_id"]: b["role"] for b in info["brokers"]}
    assert roles[4] == "observer" and sorted(roles) == [1, 2, 3, 4], info
    assert sorted(roles[n] for n in (1, 2, 3)) == ["controller", "voter", "voter"], info

    topic = unique_topic("on-four")
    assignment = [[4, 1, 2], [4, 2, 3], [1, 4, 3]]
    admin.create_topics([NewTopic(topic, len(assignment), replica_assignment=assignment)],
                        operation_timeout=20)[topic].result(30)
    el.wait(lambda: [v[0] for _p, v in sorted(_partitions(one, topic).items())][:2] == [4, 4],
          "broker 4 leading the partitions it is first replica of")
    producer = Producer({"bootstrap.servers": fourth.bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    sent = [b"v-%04d" % i for i in range(600)]
    for i, v in enumerate(sent):
        producer.produce(topic, v, partition=i % 3)
    assert producer.flush(TIMEOUT_S) == 0
    assert sorted(el.read_all(one, topic, 3, len(sent))) == sorted(sent)

    fourth.kill()
    el.wait(lambda: all(ldr in (1, 2, 3) for ldr, _r, _i in _partitions(one, topic).values()),
          "the partitions broker 4 led failing over")
    more = [b"w-%04d" % i for i in range(300)]
    producer = Producer({"bootstrap.servers": one, "enable.idempotence": True,
                         "linger.ms": 5, "log_level": 0})
    for i, v in enumerate(more):
        producer.produce(topic, v, partition=i % 3)
    assert producer.flush(TIMEOUT_S) == 0

    fourth.restart()
    # well within the 30 s full announcement: what the partitions went quiet with
    el.wait(lambda: all(4 in isr for _l, _r, isr in _partitions(one, topic).values()),
          "broker 4 back in every ISR of its partitions (as any broker describes them)", 8)
    assert sorted(el.read_all(fourth.bootstrap, topic, 3, len(sent) + len(more))) \
        == sorted(sent + more)

    # the controller killed: broker 4 (an observer) finds the new metadata leader,
    # takes a CreateTopics (forwarded to it) and learns the new topic
    controller = cluster.wait_for_controller()
    cluster.brokers[controller].kill()
    survivors = ",".join(b.bootstrap for b in cluster.brokers.values() if b.running)
    # until its session expires a killed broker is still listed, and Metadata's
    # controller_id (a random live broker, as Kafka 4's) may name it: a client
    # would send the CreateTopics there and wait out its request timeout
    el.wait(lambda: controller not in el.admin(fourth.bootstrap).list_topics(timeout=10).brokers,
          "the killed controller fenced, as broker 4 describes the cluster")
    late = unique_topic("after-controller")
    admin4 = el.admin(fourth.bootstrap)
    admin4.create_topics([NewTopic(late, 1, 3)], operation_timeout=20)[late].result(30)
    el.wait(lambda: (view := _partitions(fourth.bootstrap, late)) != {}
          and all(ldr >= 0 for ldr, _r, _i in view.values()), "the new topic led, seen by 4")
    _produce_one(survivors, late)


@pytest.mark.parametrize(("args", "says"), [
    (("--set", "process.roles=broker"),
     "name its controllers in controller.quorum.bootstrap.servers (host:port,...) or "
     "controller.quorum.voters"),
    (("--node-id", "1", "--set", "controller.quorum.voters=1@127.0.0.1:1",
      "--set", "process.roles=broker"), "process.roles must be broker,controller"),
    (("--node-id", "1", "--set", "controller.quorum.voters=2@127.0.0.1:1",
      "--set", "process.roles=controller"), "is not one of the voters"),
], ids=["broker-only-alone", "voter-as-broker-only", "controller-not-a-voter"])
def test_bad_roles_exit_with_a_clear_error(tmp_path: Path, args: tuple[str, ...],
                                           says: str) -> None:
    run = subprocess.run([sys.executable, "-m", "kcompat", "broker", "--port", "0",
                          "--data-dir", str(tmp_path / "data"), "--admin-port", "-1", *args],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and says in run.stderr, (run.returncode, run.stderr[-2000:])


def test_controller_only_node_votes_and_hosts_nothing(tmp_path: Path) -> None:
    """Voters 1 and 2 are brokers too, voter 3 is a controller only; broker 4
    is a broker only. Topics land on 1, 2 and 4 only (a replica named on 3 is
    INVALID_REPLICA_ASSIGNMENT, as for an unknown broker), Metadata never
    lists 3, DescribeQuorum counts it a voter — and with broker 1 killed -9,
    the quorum {2, 3} still commits a new topic."""
    cluster = Cluster(tmp_path, extra_args=FAST_SESSIONS)
    controller_only = cluster.brokers[3]
    controller_only.extra_args += ("--set", "process.roles=controller")
    fourth = broker_only(cluster, tmp_path / "broker-4")
    try:
        for broker in cluster.brokers.values():
            broker.start(wait=False)
        for broker in cluster.brokers.values():
            broker.wait_ready()
        fourth.start()
        two = cluster.brokers[2].bootstrap
        el.wait(lambda: sorted(el.admin(two).list_topics(timeout=10).brokers) == [1, 2, 4],
              "brokers 1, 2 and 4 (not the controller-only 3) in Metadata")
        assert sorted(v["replica_id"] for v in el.quorum(two)["current_voters"]) == [1, 2, 3]
        admin = el.admin(two)  # alive until its futures resolve
        topic = unique_topic("no-controller-replicas")
        admin.create_topics([NewTopic(topic, 6, 3)], operation_timeout=20)[topic].result(30)
        el.wait(lambda: len(_partitions(two, topic)) == 6, "the topic's partitions")
        assert all(sorted(r) == [1, 2, 4] for _l, r, _i in _partitions(two, topic).values())
        bad = unique_topic("on-controller")
        with pytest.raises(Exception, match="INVALID_REPLICA_ASSIGNMENT"):
            admin.create_topics([NewTopic(bad, 1, replica_assignment=[[3, 1]])],
                                operation_timeout=20)[bad].result(30)
        assert not [p for p in controller_only.data_dir.iterdir()
                    if p.is_dir() and not p.name.startswith("__cluster_metadata")]

        cluster.brokers[1].kill()
        el.wait(lambda: 1 not in el.admin(two).list_topics(timeout=10).brokers,
              "broker 1 fenced (its replicas are not placed on a dead broker)")
        late = unique_topic("quorum-2-3")
        admin = el.admin(two)  # a fresh client: the old one may still name broker 1 controller
        admin.create_topics([NewTopic(late, 1, 2)], operation_timeout=20)[late].result(30)
        el.wait(lambda: (view := _partitions(two, late)) != {}
              and all(ldr in (2, 4) for ldr, _r, _i in view.values()), "the new topic led")
        _produce_one(two, late)
    finally:
        fourth.kill()
        cluster.kill()
