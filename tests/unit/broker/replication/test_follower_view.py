"""What Metadata names as the leader of a partition this broker follows
(``ClusterRuntime.partition_view``), when the local replica lags the leader's
announcement.

A replica whose open (in a worker thread) finished after its partition's first
election missed the vote and the BeginQuorumEpoch: its Raft node sits in the
fresh term -1 knowing no leader, while the leader's announcement of term 0 has
arrived (and ended the topic's "being created" answer). Metadata named the
partition leaderless then (leader -1, epoch -1; a CI run of
``test_cluster_autocreate`` over SASL_SSL caught librdkafka seeing it); it names
the announced leader, as a broker that holds no replica does. So does a
restarted replica, which knows its term but not yet its leader."""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

from kcompat.broker.replication.codec import Announcement
from kcompat.broker.replication.runtime import ClusterRuntime
from kcompat.raft import NO_NODE

GID = 7 << 16
TOPIC = "new-topic"


def _runtime(term: int, leader: int, ann: Announcement | None) -> SimpleNamespace:
    """Node 1 following partition 0 of TOPIC (replicas 3, 2, 1) with its Raft
    node in ``term`` knowing ``leader``; ``ann`` the last announcement heard."""
    group = SimpleNamespace(is_leader=False, raft=SimpleNamespace(term=term, leader=leader))
    rt = SimpleNamespace(node_id=1, groups={GID: group}, assignments={(TOPIC, 0): (GID, (3, 2, 1))},
                         announced={} if ann is None else {GID: ann},
                         _awaiting_first_leader={GID})
    rt._raw_view = partial(ClusterRuntime._raw_view, rt)
    return rt


def _view(rt: SimpleNamespace) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
    return ClusterRuntime.partition_view(rt, TOPIC, 0, fenced=set())  # type: ignore[arg-type]


def test_a_replica_opened_after_the_first_election_names_the_announced_leader() -> None:
    rt = _runtime(-1, NO_NODE, Announcement(GID, 0, 3, (2, 3)))
    assert _view(rt) == (3, 0, (3, 2, 1), (2, 3))
    assert not ClusterRuntime.first_leader_pending(rt, TOPIC, 0)  # type: ignore[arg-type]


def test_before_any_announcement_the_new_partition_is_still_being_created() -> None:
    rt = _runtime(-1, NO_NODE, None)
    assert ClusterRuntime.first_leader_pending(rt, TOPIC, 0)  # type: ignore[arg-type]
    assert _view(rt)[0] == NO_NODE


def test_a_restarted_replica_names_the_leader_announced_in_its_own_term() -> None:
    """After a restart the replica's Raft node has its term from disk and no
    leader until the leader's BeginQuorumEpoch or a fetch answer arrives:
    the announcement of that same term names the leader meanwhile (-1 sent
    librdkafka's watermark query into _UNKNOWN_PARTITION for good)."""
    rt = _runtime(3, NO_NODE, Announcement(GID, 3, 2, (1, 2, 3)))
    assert _view(rt) == (2, 3, (3, 2, 1), (1, 2, 3))


def test_an_election_in_a_newer_term_is_not_hidden_by_an_older_announcement() -> None:
    """The replica is in term 2 with no leader (a vote under way): the leader
    of term 1 it announced is not named."""
    rt = _runtime(2, NO_NODE, Announcement(GID, 1, 3, (1, 2, 3)))
    assert _view(rt) == (NO_NODE, 2, (3, 2, 1), ())


def test_a_followed_leader_gets_its_announced_isr() -> None:
    assert _view(_runtime(4, 3, Announcement(GID, 4, 3, (1, 3)))) == (3, 4, (3, 2, 1), (1, 3))
    # an announcement of an older term does not speak for the current one
    assert _view(_runtime(5, 2, Announcement(GID, 4, 3, (1, 3)))) == (2, 5, (3, 2, 1), (2,))
