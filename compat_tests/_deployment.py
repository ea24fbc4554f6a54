"""Where a client suite runs: one kcompat broker, or a 3-broker cluster.

Issue 12: the consumer-group, transaction and produce/consume suites run against
a single node and against 3-broker clusters where every topic has replication
factor 1 (``rf1``: each partition on one broker, most of them not the group or
transaction coordinator) or 3 (``rf3``: every broker a replica, the leaders
spread). The replication factor is the cluster's: topics a test creates (with
``replication``, through its own client's admin API, which sends CreateTopics
to the controller), topics a client auto-creates (``default.replication.factor``)
and ``__consumer_offsets`` / ``__transaction_state`` alike. A test takes a
``Deployment`` from a fixture (``compat_tests/conftest.py``); it never needs to
know which kind it got.
"""

from __future__ import annotations

from dataclasses import dataclass

from compat_tests._broker import Broker
from compat_tests._cluster import Cluster

KINDS = ("single", "rf1", "rf3")
#: Where each fixture runs by default: every test on a single node and on one
#: cluster kind — the group suites at rf1 (the groups' partitions on other
#: brokers than their coordinator), the transaction suites at rf3 (replicated
#: ``__transaction_state`` and ``__consumer_offsets``, markers to other leaders),
#: the produce/consume suites at rf1, with about half of each client's tests
#: moved to rf3 by an indirect parametrize
#: (``@pytest.mark.parametrize("pbroker", SINGLE_AND_RF3, indirect=True)``).
GROUP_KINDS = ("single", "rf1")
TXN_KINDS = ("single", "rf3")
PRODUCE_KINDS = ("single", "rf1")
SINGLE_ONLY = ("single",)
SINGLE_AND_RF3 = ("single", "rf3")
RF3_ONLY = ("rf3",)
#: Broker flags of the session's clusters, shared by the produce, group and
#: transaction suites: groups form at once (no initial rebalance delay),
#: timed-out transactions are checked every 500 ms, and the internal topics have
#: 10 partitions instead of 50 (still spread over the three brokers, so most
#: groups and transactional ids are coordinated elsewhere than their topics'
#: leaders; fewer Raft groups to create and tick, as Kafka's own integration
#: tests shrink them).
#: Share-group suites (KIP-932): acquisition locks as short as 1 s (Kafka's
#: ``group.share.min.record.lock.duration.ms`` is 15 s by default, so a test of
#: lock expiry would wait that long) and 10 share-state partitions.
SHARE_BROKER_ARGS = ("--set", "group.share.min.record.lock.duration.ms=1000",
                     "--set", "share.coordinator.state.topic.num.partitions=10")
#: KIP-848 suites (``group.protocol=consumer``): a member's session ends 2 s after
#: its last heartbeat (Kafka's default is 45 s, and its lower bound too), so a
#: killed member's partitions move within a test's time; only consumer-protocol
#: groups read these keys.
CONSUMER_PROTOCOL_ARGS = ("--set", "group.consumer.min.session.timeout.ms=1000",
                          "--set", "group.consumer.session.timeout.ms=2000",
                          "--set", "group.consumer.min.heartbeat.interval.ms=100",
                          "--set", "group.consumer.heartbeat.interval.ms=250")
CLUSTER_BROKER_ARGS = ("--set", "group.initial.rebalance.delay.ms=0",
                       "--set", "transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
                       "--set", "offsets.topic.num.partitions=10",
                       "--set", "transaction.state.log.num.partitions=10",
                       *SHARE_BROKER_ARGS, *CONSUMER_PROTOCOL_ARGS)


@dataclass
class Deployment:
    kind: str
    brokers: tuple[Broker, ...]
    cluster: Cluster | None = None

    @classmethod
    def single(cls, broker: Broker) -> Deployment:
        return cls("single", (broker,))

    @classmethod
    def of_cluster(cls, cluster: Cluster, kind: str) -> Deployment:
        return cls(kind, tuple(cluster.brokers.values()), cluster)

    @staticmethod
    def cluster_args(kind: str) -> tuple[str, ...]:
        """Broker flags of a cluster of ``kind`` (``rf1`` or ``rf3``)."""
        rf = 3 if kind == "rf3" else 1
        return tuple(arg for key in ("default.replication.factor",
                                     "offsets.topic.replication.factor",
                                     "transaction.state.log.replication.factor",
                                     "kc.schedule.topic.replication.factor")
                     for arg in ("--set", f"{key}={rf}"))

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    @property
    def replication(self) -> int:
        """The replication factor this deployment's tests create topics with."""
        return 3 if self.kind == "rf3" else 1

    @property
    def is_cluster(self) -> bool:
        return self.cluster is not None

    def leader_of(self, topic: str, partition: int) -> Broker:
        """The broker leading the partition (as Metadata names it)."""
        if self.cluster is None:
            return self.brokers[0]
        return self.cluster.brokers[self.cluster.leaders(topic)[partition]]

    def stored_codecs(self, topic: str, partition: int) -> list[int]:
        """``Broker.stored_codecs`` of the partition's leader (a follower may
        still be fetching the last batch)."""
        return self.leader_of(topic, partition).stored_codecs(topic, partition)

    def __repr__(self) -> str:
        return f"<Deployment {self.kind} {self.bootstrap}>"
