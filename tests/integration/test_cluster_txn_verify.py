"""KIP-890 part 1 across brokers (real processes): a partition leader that is
not the transaction coordinator asks the coordinator before it accepts a
transaction's first batch in a partition.

Every request is encoded and every answer decoded with kafka-python's protocol
classes and record-batch builder (an independent codec), on raw connections to
the broker each request belongs to:

* a transactional batch for a partition its transaction has not added is
  refused with INVALID_TXN_STATE (48) and nothing is written;
* after AddPartitionsToTxn the same batch is accepted;
* after the commit's markers are in the partition, a new batch of the same
  producer id/epoch without a new AddPartitionsToTxn is refused again (48),
  while a new transaction that adds the partition is accepted;
* while the coordinator cannot answer (its process stopped) the batch gets the
  retriable NOT_ENOUGH_REPLICAS (19), and is accepted once it answers again;
* a read_committed consumer sees exactly the committed record.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin.transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
)
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from kafka.record.default_records import DefaultRecordBatchBuilder

from compat_tests._broker import unique_topic
from compat_tests._cluster import Cluster
from tests.integration._raw import RawConnection

PARTITIONS = 6
TXN_STATE_PARTITIONS = 3

NONE = 0
NOT_LEADER_OR_FOLLOWER = 6
NOT_ENOUGH_REPLICAS = 19
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_TXN_STATE = 48
CONCURRENT_TRANSACTIONS = 51
RETRIABLE_COORDINATOR = {COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
                         NOT_COORDINATOR, CONCURRENT_TRANSACTIONS}

PD = ProduceRequest.TopicProduceData
APT = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
LT = ListOffsetsRequest.ListOffsetsTopic


# -- helpers: kafka-python requests on raw connections ---------------------------------


class Node:
    """Raw connections to every broker of the cluster, by node id."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.conns: dict[int, RawConnection] = {}

    def __call__(self, node: int) -> RawConnection:
        if node not in self.conns:
            self.conns[node] = RawConnection(self.cluster.brokers[node].bootstrap, timeout=30.0)
        return self.conns[node]

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()


def poll(what: str, attempt: Callable[[], tuple[bool, Any]], timeout_s: float = 30.0,
         pause_s: float = 0.2) -> Any:
    """Call ``attempt`` until it reports done; its last answer on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        done, answer = attempt()
        if done:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: still {answer!r} after {timeout_s:.0f} s")
        time.sleep(pause_s)


def find_txn_coordinator(nodes: Node, any_node: int, tid: str) -> int:
    def attempt() -> tuple[bool, Any]:
        r = nodes(any_node).request(FindCoordinatorRequest[3](key=tid, key_type=1),
                                    FindCoordinatorResponse[3])
        return r.error_code == NONE, (r.error_code, r.node_id)
    return int(poll("FindCoordinator(TRANSACTION)", attempt)[1])


def init_producer_id(nodes: Node, coordinator: int, tid: str) -> tuple[int, int]:
    def attempt() -> tuple[bool, Any]:
        r = nodes(coordinator).request(
            InitProducerIdRequest[3](transactional_id=tid, transaction_timeout_ms=60_000,
                                     producer_id=-1, producer_epoch=-1),
            InitProducerIdResponse[3])
        assert r.error_code in {NONE} | RETRIABLE_COORDINATOR, f"InitProducerId: {r}"
        return r.error_code == NONE, (r.error_code, r.producer_id, r.producer_epoch)
    _code, pid, epoch = poll("InitProducerId", attempt)
    return int(pid), int(epoch)


def add_partition(nodes: Node, coordinator: int, tid: str, pid: int, epoch: int,
                  topic: str, partition: int) -> None:
    def attempt() -> tuple[bool, Any]:
        r = nodes(coordinator).request(
            AddPartitionsToTxnRequest[3](v3_and_below_transactional_id=tid,
                                         v3_and_below_producer_id=pid,
                                         v3_and_below_producer_epoch=epoch,
                                         v3_and_below_topics=[APT(name=topic,
                                                                  partitions=[partition])]),
            AddPartitionsToTxnResponse[3])
        codes = [(t.name, p.partition_index, p.partition_error_code)
                 for t in r.results_by_topic_v3_and_below for p in t.results_by_partition]
        assert len(codes) == 1 and codes[0][:2] == (topic, partition), codes
        code = codes[0][2]
        assert code in {NONE} | RETRIABLE_COORDINATOR, f"AddPartitionsToTxn: {codes}"
        return code == NONE, code
    poll("AddPartitionsToTxn", attempt)


def end_txn(nodes: Node, coordinator: int, tid: str, pid: int, epoch: int,
            commit: bool) -> int:
    r = nodes(coordinator).request(
        EndTxnRequest[3](transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                         committed=commit),
        EndTxnResponse[3])
    assert r.error_code in {NONE} | RETRIABLE_COORDINATOR, f"EndTxn: {r}"
    return int(r.error_code)


def txn_state(nodes: Node, coordinator: int, tid: str) -> tuple[int, str]:
    r = nodes(coordinator).request(DescribeTransactionsRequest[0](transactional_ids=[tid]),
                                   DescribeTransactionsResponse[0])
    s = r.transaction_states[0]
    return int(s.error_code), str(s.transaction_state)


def leaders(nodes: Node, node: int, topic: str) -> dict[int, int]:
    r = nodes(node).request(
        MetadataRequest[9](topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                           allow_auto_topic_creation=False,
                           include_cluster_authorized_operations=False,
                           include_topic_authorized_operations=False),
        MetadataResponse[9])
    (t,) = r.topics
    assert t.error_code == NONE, t
    return {p.partition_index: p.leader_id for p in t.partitions}


def end_offset(nodes: Node, leader: int, topic: str, partition: int,
               committed: bool = True) -> int:
    """The last stable offset (``committed``) or the high watermark."""
    req = ListOffsetsRequest[5](replica_id=-1, isolation_level=int(committed), topics=[
        LT(name=topic, partitions=[LT.ListOffsetsPartition(partition_index=partition,
                                                           current_leader_epoch=-1,
                                                           timestamp=-1)])])
    p = nodes(leader).request(req, ListOffsetsResponse[5]).topics[0].partitions[0]
    assert p.error_code == NONE, p
    return int(p.offset)


def txn_batch(pid: int, epoch: int, seq: int, value: bytes) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True,
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                  batch_size=1 << 20)
    b.append(0, timestamp=int(time.time() * 1000), key=b"k", value=value, headers=[])
    return bytes(b.build())


def produce(nodes: Node, leader: int, tid: str, topic: str, partition: int,
            records: bytes) -> tuple[int, int, str | None]:
    req = ProduceRequest[9](transactional_id=tid, acks=-1, timeout_ms=10_000, topic_data=[
        PD(name=topic, partition_data=[PD.PartitionProduceData(index=partition,
                                                               records=records)])])
    r = nodes(leader).request(req, ProduceResponse[9])
    (t,) = r.responses
    (p,) = t.partition_responses
    assert (t.name, p.index) == (topic, partition)
    return int(p.error_code), int(p.base_offset), p.error_message


def read_partition(bootstrap: str, topic: str, partition: int, isolation: str) -> list[bytes]:
    """Every record value a consumer with ``isolation`` reads from the start up
    to the end it is allowed to see (EOF event)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("verify"),
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": isolation, "enable.partition.eof": True,
                         "log_level": 0})
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while True:
            assert time.monotonic() < deadline, f"no EOF after {values}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return values
                continue
            values.append(msg.value() or b"")
    finally:
        consumer.close()


class Setup:
    """A cluster, a topic, a producer id, and a partition led by a broker
    that is not the producer's transaction coordinator."""

    def __init__(self, cluster: Cluster, tid_prefix: str) -> None:
        self.cluster = cluster
        self.nodes = Node(cluster)
        self.topic = unique_topic("txnv")
        cluster.create_topic(self.topic, PARTITIONS, 3)
        self.tid = unique_topic(tid_prefix)
        self.coordinator = find_txn_coordinator(self.nodes, 1, self.tid)
        self.pid, self.epoch = init_producer_id(self.nodes, self.coordinator, self.tid)
        # Partition leaders as the coordinator's metadata reports them.
        def known() -> tuple[bool, Any]:
            m = leaders(self.nodes, self.coordinator, self.topic)
            return len(m) == PARTITIONS and all(ldr > 0 for ldr in m.values()), m
        by_partition = poll("leaders", known)
        others = sorted(p for p, ldr in by_partition.items() if ldr != self.coordinator)
        assert others, f"every partition led by the coordinator {self.coordinator}: {by_partition}"
        self.partition = others[0]
        self.leader = by_partition[self.partition]
        print(f"coordinator of {self.tid}: broker {self.coordinator}; producer id {self.pid} "
              f"epoch {self.epoch}; partition {self.partition} led by broker {self.leader}")

    def produce(self, seq: int, value: bytes) -> tuple[int, int, str | None]:
        return produce(self.nodes, self.leader, self.tid, self.topic, self.partition,
                       txn_batch(self.pid, self.epoch, seq, value))

    def add(self) -> None:
        add_partition(self.nodes, self.coordinator, self.tid, self.pid, self.epoch,
                      self.topic, self.partition)

    def _follow(self, code: int) -> None:
        if code in (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE):  # the coordinator moved
            self.coordinator = find_txn_coordinator(self.nodes, self.leader, self.tid)

    def end(self, commit: bool, markers_to: int | None) -> None:
        """EndTxn, then wait until the coordinator completed it and the
        partition's marker is in: the last stable offset reached the high
        watermark (and ``markers_to``, when given)."""
        def ended() -> tuple[bool, Any]:
            code = end_txn(self.nodes, self.coordinator, self.tid, self.pid, self.epoch, commit)
            self._follow(code)
            return code == NONE, code

        want = "CompleteCommit" if commit else "CompleteAbort"

        def completed() -> tuple[bool, Any]:
            state = txn_state(self.nodes, self.coordinator, self.tid)
            self._follow(state[0])
            return state == (NONE, want), state

        def marked() -> tuple[bool, Any]:
            lso = end_offset(self.nodes, self.leader, self.topic, self.partition)
            hw = end_offset(self.nodes, self.leader, self.topic, self.partition, False)
            return lso == hw and markers_to in (None, lso), (lso, hw)
        poll("EndTxn", ended)
        poll("transaction completed", completed)
        poll("marker in the partition", marked)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, extra_args=(
        "--set", f"transaction.state.log.num.partitions={TXN_STATE_PARTITIONS}",
        "--set", "transaction.state.log.replication.factor=3",
        # the verifying consumers' FindCoordinator creates __consumer_offsets:
        # keep it small, or the brokers' controlled shutdown waits on 50 elections
        "--set", "offsets.topic.num.partitions=3"))
    try:
        yield c.start()
    finally:
        c.close()


def test_partition_leader_verifies_with_remote_coordinator(cluster: Cluster) -> None:
    t0 = time.monotonic()
    s = Setup(cluster, "txv")
    assert s.leader != s.coordinator
    # A cluster partition starts with its leader's LeaderChange control batch(es).
    start = end_offset(s.nodes, s.leader, s.topic, s.partition, committed=False)

    # 1. No AddPartitionsToTxn yet: the coordinator does not confirm the partition.
    first = txn_batch(s.pid, s.epoch, 0, b"committed")
    code, _off, msg = produce(s.nodes, s.leader, s.tid, s.topic, s.partition, first)
    assert code == INVALID_TXN_STATE, (code, msg)
    assert end_offset(s.nodes, s.leader, s.topic, s.partition, committed=False) == start

    # 2. After AddPartitionsToTxn the very same batch is accepted.
    s.add()
    code, offset, msg = produce(s.nodes, s.leader, s.tid, s.topic, s.partition, first)
    assert (code, offset) == (NONE, start), (code, offset, msg)
    assert end_offset(s.nodes, s.leader, s.topic, s.partition) == start  # open: LSO held

    # 3. Commit; the marker lands right after the record.
    s.end(commit=True, markers_to=start + 2)

    # 4. Same producer id/epoch, no new AddPartitionsToTxn: refused again.
    code, _off, msg = s.produce(1, b"stray")
    assert code == INVALID_TXN_STATE, (code, msg)
    assert end_offset(s.nodes, s.leader, s.topic, s.partition, committed=False) == start + 2

    # 5. A new transaction that adds the partition is verified afresh; abort it,
    #    and the producer is refused again afterwards.
    s.add()
    code, offset, msg = s.produce(1, b"aborted")
    assert (code, offset) == (NONE, start + 2), (code, offset, msg)
    s.end(commit=False, markers_to=start + 4)
    code, _off, msg = s.produce(2, b"stray-2")
    assert code == INVALID_TXN_STATE, (code, msg)
    assert end_offset(s.nodes, s.leader, s.topic, s.partition, committed=False) == start + 4

    bootstrap = cluster.bootstrap
    assert read_partition(bootstrap, s.topic, s.partition, "read_committed") == [b"committed"]
    assert read_partition(bootstrap, s.topic, s.partition, "read_uncommitted") == [
        b"committed", b"aborted"]
    s.nodes.close()
    print(f"scenario took {time.monotonic() - t0:.2f} s")


def test_unreachable_coordinator_answers_retriable(cluster: Cluster) -> None:
    """The coordinator's process is stopped (SIGSTOP): the partition leader
    cannot verify and answers NOT_ENOUGH_REPLICAS, writing nothing; once a
    coordinator answers again (the same one resumed, or a new leader of its
    __transaction_state partition) the same batch is accepted, once."""
    s = Setup(cluster, "txv-stop")
    s.add()
    start = end_offset(s.nodes, s.leader, s.topic, s.partition, committed=False)
    victim = cluster.brokers[s.coordinator]
    assert victim.pid is not None
    batch = txn_batch(s.pid, s.epoch, 0, b"after-resume")
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        code, _off, msg = produce(s.nodes, s.leader, s.tid, s.topic, s.partition, batch)
        waited = time.monotonic() - t0
        print(f"answer while the coordinator is stopped: {code} {msg!r} after {waited:.2f} s")
        assert code == NOT_ENOUGH_REPLICAS, (code, msg)
        assert end_offset(s.nodes, s.leader, s.topic, s.partition, committed=False) == start
    finally:
        os.kill(victim.pid, signal.SIGCONT)
    t0 = time.monotonic()
    answers: list[int] = []

    def attempt() -> tuple[bool, Any]:
        code, offset, msg = produce(s.nodes, s.leader, s.tid, s.topic, s.partition, batch)
        answers.append(code)
        assert code in (NONE, NOT_ENOUGH_REPLICAS, NOT_LEADER_OR_FOLLOWER), (code, msg)
        if code == NOT_LEADER_OR_FOLLOWER:  # the partition moved meanwhile: follow it
            s.leader = leaders(s.nodes, s.coordinator, s.topic)[s.partition]
        return code == NONE, (code, offset, msg)
    poll("produce after the coordinator resumed", attempt, timeout_s=60)
    print(f"accepted {time.monotonic() - t0:.2f} s after SIGCONT; answers {answers}")
    s.end(commit=True, markers_to=None)
    assert read_partition(cluster.bootstrap, s.topic, s.partition, "read_committed") == [
        b"after-resume"]
    s.nodes.close()
