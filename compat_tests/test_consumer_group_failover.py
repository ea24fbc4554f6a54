"""KIP-848 consumer groups across a kill -9 of their coordinator (3 brokers, RF 3).

Two members (kio requests, so every epoch is seen) join a consumer group and
reconcile to a stable assignment; member ``a`` commits an offset at its epoch.
The broker coordinating the group (leader of its ``__consumer_offsets``
partition) is killed with SIGKILL. Another broker becomes the coordinator and
must rebuild the group from the committed snapshot records: the members'
heartbeats at their old epochs are accepted with the same epochs and
assignments, ConsumerGroupDescribe shows the same group epoch, ListGroups
lists it, and the member's committed offset is fetched at its epoch. The killed broker is
started again afterwards (the session's cluster stays whole).
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v1 import request as hb_req
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.metadata.v12 import request as metadata
from kio.schema.offset_commit.v9 import request as oc_req
from kio.schema.offset_fetch.v9 import request as of_req

from compat_tests._broker import Broker
from compat_tests._deployment import RF3_ONLY, Deployment
from compat_tests._groups import create_topic, unique_group, wait_for
from kcompat.cli._common import CliError
from kcompat.cli._kio import Connection

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 4
RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS / _NOT_AVAILABLE, NOT_COORDINATOR


def connect(broker: Broker) -> Connection:
    host, port = broker.bootstrap.rsplit(":", 1)
    return Connection(host, int(port), 5.0)


class Member:
    def __init__(self, name: str, group: str, topic: str, topic_id: uuid.UUID) -> None:
        self.name, self.group, self.topic, self.topic_id = name, group, topic, topic_id
        self.epoch = 0
        self.owned: tuple[int, ...] = ()

    def beat(self, conn: Connection) -> Any:
        joining = self.epoch == 0
        owned = (hb_req.TopicPartitions(topic_id=self.topic_id, partitions=self.owned),) \
            if self.owned else ()
        r = conn.call(hb_req.ConsumerGroupHeartbeatRequest(
            group_id=self.group, member_id=self.name, member_epoch=self.epoch,
            instance_id=None, rack_id=None,
            rebalance_timeout=datetime.timedelta(milliseconds=10_000 if joining else -1),
            subscribed_topic_names=(self.topic,) if joining else None,
            subscribed_topic_regex=None, server_assignor=None, topic_partitions=owned))
        if r.error_code == 0:
            self.epoch = r.member_epoch
            if r.assignment is not None:
                self.owned = tuple(sorted(p for t in r.assignment.topic_partitions
                                          for p in t.partitions))
        return r


def describe(conn: Connection, group: str) -> Any:
    return conn.call(ConsumerGroupDescribeRequest(group_ids=(group,),
                                                  include_authorized_operations=False)).groups[0]


def coordinator(brokers: dict[int, Broker], group: str) -> int:
    """The node id coordinating ``group`` as a live broker answers it."""
    for broker in brokers.values():
        if not broker.running:
            continue
        try:
            found = connect(broker).call(FindCoordinatorRequest(
                key_type=0, coordinator_keys=(group,))).coordinators[0]
        except CliError:
            continue
        if found.error_code == 0 and brokers[found.node_id].running:
            return int(found.node_id)
    return -1


@pytest.mark.parametrize("sbroker", RF3_ONLY, indirect=True)
def test_members_keep_their_epochs_on_the_new_coordinator(sbroker: Deployment) -> None:
    assert sbroker.cluster is not None
    brokers = sbroker.cluster.brokers
    topic, group = f"kip848-fo-{uuid.uuid4().hex[:6]}", unique_group("kip848-fo")
    create_topic(sbroker.bootstrap, topic, PARTITIONS, 3)
    wait_for(lambda: coordinator(brokers, group) > 0, 30, "no coordinator for the group")
    node = coordinator(brokers, group)
    conn = connect(brokers[node])
    topic_id = conn.call(metadata.MetadataRequest(
        topics=(metadata.MetadataRequestTopic(topic_id=None, name=topic),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False)).topics[0].topic_id
    a, b = Member("a", group, topic, topic_id), Member("b", group, topic, topic_id)

    def stable() -> bool:
        for m in (a, b):
            assert m.beat(conn).error_code == 0
        return describe(conn, group).group_state == "Stable" and a.epoch == b.epoch
    wait_for(stable, 30, lambda: repr(describe(conn, group)), interval=0.3)
    before = describe(conn, group)
    assert len(a.owned) + len(b.owned) == PARTITIONS and a.owned and b.owned
    committed = conn.call(oc_req.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=a.epoch, member_id="a",
        group_instance_id=None, topics=(oc_req.OffsetCommitRequestTopic(name=topic, partitions=(
            oc_req.OffsetCommitRequestPartition(partition_index=a.owned[0], committed_offset=7,
                                                committed_leader_epoch=-1,
                                                committed_metadata=""),)),)))
    assert committed.topics[0].partitions[0].error_code == 0
    epochs = (a.epoch, b.epoch, a.owned, b.owned)

    brokers[node].kill()
    try:
        new: dict[str, Any] = {}

        def taken_over() -> bool:
            new["node"] = coordinator(brokers, group)
            if new["node"] < 0:
                return False
            try:
                new["conn"] = connect(brokers[new["node"]])
                r = a.beat(new["conn"])
            except CliError:
                return False
            new["answer"] = r
            return r.error_code not in RETRIABLE
        wait_for(taken_over, 30, lambda: f"no new coordinator: {new}", interval=0.2)
        assert new["node"] != node
        assert new["answer"].error_code == 0, new["answer"]
        conn = new["conn"]
        assert b.beat(conn).error_code == 0
        assert (a.epoch, b.epoch, a.owned, b.owned) == epochs  # nobody had to rejoin
        after = describe(conn, group)
        assert (after.group_state, after.group_epoch, after.assignment_epoch) == (
            before.group_state, before.group_epoch, before.assignment_epoch)
        assert sorted((m.member_id, m.member_epoch) for m in after.members) == sorted(
            (m.member_id, m.member_epoch) for m in before.members)
        listed = conn.call(ListGroupsRequest(states_filter=(), types_filter=("consumer",)))
        assert [(g.group_state, g.group_type) for g in listed.groups
                if g.group_id == group] == [("Stable", "consumer")]
        fetched = conn.call(of_req.OffsetFetchRequest(groups=(of_req.OffsetFetchRequestGroup(
            group_id=group, member_id="a", member_epoch=a.epoch, topics=None),),
            require_stable=False)).groups[0]
        assert fetched.error_code == 0
        offsets = {(t.name, p.partition_index): p.committed_offset
                   for t in fetched.topics for p in t.partitions}
        assert offsets == {(topic, a.owned[0]): 7}
    finally:
        brokers[node].start()
