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
#: the kinds of tests that keep ``make test`` short by skipping rf1 (the rf1
#: cluster runs every other test of their module): scenarios made of fixed
#: waits (session timeouts, a transaction timeout) that exercise the
#: coordinators rather than the topics' replication, and Kafka's own tools
#: (the Java clients suite covers rf1). Use
#: ``@pytest.mark.parametrize("gbroker", SINGLE_AND_RF3, indirect=True)``.
SINGLE_AND_RF3 = ("single", "rf3")
CLUSTER_KINDS = ("rf1", "rf3")


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
                                     "transaction.state.log.replication.factor")
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
