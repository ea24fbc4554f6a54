"""Differential: KIP-848 consumer groups on Apache Kafka 4.4 and on kcompat, at
the wire level.

One script (``run_script``) runs once against each broker: bad
ConsumerGroupHeartbeat requests, a group of two members going through a
rebalance (join, revocation, assignment), fencing, a static member leaving
and coming back under a new member id, OffsetCommit / OffsetFetch from
members, the Java Admin client's view (describeConsumerGroups, listGroups of
type consumer, listConsumerGroupOffsets: ``DescribeConsumerGroup``), the
classic APIs on the group (ListGroups, DescribeGroups,
JoinGroup, DeleteGroups), a classic consumer joining the consumer group (mixed
groups) and the shared group id namespace (a heartbeat to a
live classic group and to a group with offsets only). Each step keeps the
answer's error code and message and the epochs, states and assignment sizes
(ConsumerGroupDescribe normalized: members by id, partitions counted, the
group id in messages replaced). Each step is a test: kcompat's answer must be
Kafka's. Requests are encoded and answers decoded with kio.
"""

from __future__ import annotations

import datetime
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v1 import request as hb_req
from kio.schema.create_topics.v7 import request as create_topics
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.join_group.v9 import request as join_req
from kio.schema.leave_group.v5 import request as leave_req
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.metadata.v12 import request as metadata
from kio.schema.offset_commit.v9 import request as oc_req
from kio.schema.offset_fetch.v9 import request as of_req
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest
from kio.schema.sync_group.v5 import request as sync_req

from compat_tests._broker import Broker, running
from compat_tests._groups import FAST_BROKER_ARGS
from compat_tests.java.conftest import PKG, run_java
from compat_tests.java.kafka_reference import KafkaReference
from kcompat.cli._kio import Connection
from kcompat.group.consumer_protocol import encode_subscription

pytestmark = pytest.mark.timeout(120)

TOPIC = "kip848-diff"
PARTITIONS = 4
REBALANCE_MS = 10_000
#: the assignment interval (group.consumer.assignment.interval.ms, 1 s on both)
#: passed: the next heartbeat computes the new target assignment
ASSIGNMENT_WAIT_S = 1.2
#: Kafka's coordinator sees a new topic's metadata settle (its hash changes once
#: more, bumping a group's epoch) in its first moments: the script waits that out
KAFKA_TOPIC_SETTLE_S = 2.0

Answer = tuple[Any, ...]


class Script:
    def __init__(self, conn: Connection, run: str, settle_s: float) -> None:
        self.conn = conn
        self.run = run
        self.settle_s = settle_s
        self.group = f"kip848-{run}"
        self.out: dict[str, Answer] = {}
        self.topic_id: uuid.UUID | None = None

    def norm(self, text: str | None) -> str | None:
        return None if text is None else text.replace(self.run, "<run>")

    # -- requests ------------------------------------------------------------------------

    def hb(self, step: str, member: str, epoch: int, *, group: str | None = None,
           topics: tuple[str, ...] | None = None, regex: str | None = None,
           owned: tuple[int, ...] | None = None, rto: int = -1, instance: str | None = None,
           assignor: str | None = None, message: bool = True) -> Any:
        owned_tps = None if owned is None else (
            () if not owned else (hb_req.TopicPartitions(topic_id=self.topic_id,
                                                         partitions=owned),))
        r = self.conn.call(hb_req.ConsumerGroupHeartbeatRequest(
            group_id=self.group if group is None else group, member_id=member,
            member_epoch=epoch, instance_id=instance, rack_id=None,
            rebalance_timeout=datetime.timedelta(milliseconds=rto),
            subscribed_topic_names=topics, subscribed_topic_regex=regex,
            server_assignor=assignor, topic_partitions=owned_tps))
        assigned = None if r.assignment is None else sorted(
            p for t in r.assignment.topic_partitions for p in t.partitions)
        self.out[step] = (int(r.error_code), self.norm(r.error_message) if message else None,
                          r.member_epoch, None if r.assignment is None else len(assigned or ()),
                          r.heartbeat_interval.total_seconds() if not r.error_code else None)
        return r

    def join(self, step: str, member: str, **kw: Any) -> Any:
        kw.setdefault("topics", (TOPIC,))
        return self.hb(step, member, 0, owned=(), rto=REBALANCE_MS, **kw)

    def describe(self, step: str, group: str | None = None) -> None:
        r = self.conn.call(ConsumerGroupDescribeRequest(
            group_ids=(self.group if group is None else group,),
            include_authorized_operations=False))
        g = r.groups[0]
        members = tuple(sorted(
            (m.member_id, m.member_epoch, m.instance_id, tuple(m.subscribed_topic_names),
             m.subscribed_topic_regex, sum(len(t.partitions) for t in m.assignment.topic_partitions),
             sum(len(t.partitions) for t in m.target_assignment.topic_partitions),
             m.client_id, m.member_type) for m in g.members))
        self.out[step] = (int(g.error_code), self.norm(g.error_message), g.group_state,
                          g.group_epoch, g.assignment_epoch, g.assignor_name, members)

    def commit(self, step: str, member: str, epoch: int, group: str | None = None) -> None:
        r = self.conn.call(oc_req.OffsetCommitRequest(
            group_id=self.group if group is None else group,
            generation_id_or_member_epoch=epoch, member_id=member, group_instance_id=None,
            topics=(oc_req.OffsetCommitRequestTopic(name=TOPIC, partitions=(
                oc_req.OffsetCommitRequestPartition(partition_index=0, committed_offset=0,
                                                    committed_leader_epoch=-1,
                                                    committed_metadata=""),)),)))
        self.out[step] = tuple(int(p.error_code) for t in r.topics for p in t.partitions)

    def fetch(self, step: str, member: str | None, epoch: int, group: str | None = None) -> None:
        r = self.conn.call(of_req.OffsetFetchRequest(groups=(of_req.OffsetFetchRequestGroup(
            group_id=self.group if group is None else group, member_id=member,
            member_epoch=epoch, topics=None),), require_stable=False))
        g = r.groups[0]
        self.out[step] = (int(g.error_code), tuple(
            (t.name, tuple((p.partition_index, p.committed_offset) for p in t.partitions))
            for t in g.topics))

    def join_classic(self, group: str, protocol_type: str, member: str = "") -> Any:
        return self.conn.call(join_req.JoinGroupRequest(
            group_id=group, session_timeout=datetime.timedelta(seconds=30),
            rebalance_timeout=datetime.timedelta(seconds=30), member_id=member,
            group_instance_id=None, protocol_type=protocol_type,
            protocols=(join_req.JoinGroupRequestProtocol(name="p", metadata=b""),),
            reason=None))

    # -- setup ---------------------------------------------------------------------------

    def setup(self) -> None:
        answer = self.conn.call(create_topics.CreateTopicsRequest(
            topics=(create_topics.CreatableTopic(name=TOPIC, num_partitions=PARTITIONS,
                                                 replication_factor=1, assignments=(),
                                                 configs=()),),
            timeout=datetime.timedelta(seconds=10), validate_only=False))
        assert answer.topics[0].error_code in (0, 36), answer  # 36: left from a rerun
        if answer.topics[0].error_code == 0:
            time.sleep(self.settle_s)
        found = self.conn.call(metadata.MetadataRequest(
            topics=(metadata.MetadataRequestTopic(topic_id=None, name=TOPIC),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        self.topic_id = found.topics[0].topic_id
        groups = (self.group, self.classic, self.offsets_only, self.empty)
        deadline = time.monotonic() + 30
        while True:  # every group's coordinator loaded (Kafka: the partition's too)
            coordinators = self.conn.call(FindCoordinatorRequest(
                key_type=0, coordinator_keys=groups)).coordinators
            described = self.conn.call(ConsumerGroupDescribeRequest(
                group_ids=groups, include_authorized_operations=False)).groups
            if all(c.error_code == 0 for c in coordinators) and all(
                    g.error_code not in (14, 15, 16) for g in described):
                break
            assert time.monotonic() < deadline, (coordinators, described)
            time.sleep(0.2)

    @property
    def classic(self) -> str:
        return f"{self.group}-classic"

    @property
    def offsets_only(self) -> str:
        return f"{self.group}-offsets"

    @property
    def empty(self) -> str:
        return f"{self.group}-empty"


def bad_requests(s: Script) -> None:
    s.hb("hb-empty-member-id", "", 0, topics=(TOPIC,), rto=REBALANCE_MS, owned=())
    s.hb("hb-empty-group-id", "m", 0, group="", topics=(TOPIC,), rto=REBALANCE_MS, owned=())
    s.hb("hb-join-without-rebalance-timeout", "m", 0, topics=(TOPIC,), owned=())
    s.hb("hb-join-without-owned", "m", 0, topics=(TOPIC,), rto=REBALANCE_MS)
    s.hb("hb-join-owning-partitions", "m", 0, topics=(TOPIC,), rto=REBALANCE_MS, owned=(0,))
    s.hb("hb-join-without-subscription", "m", 0, rto=REBALANCE_MS, owned=())
    s.hb("hb-epoch-minus-3", "m", -3, topics=(TOPIC,), rto=REBALANCE_MS, owned=())
    s.hb("hb-static-leave-without-instance", "m", -2)
    # the message quotes the regex engine's own words (Java's vs Python's)
    s.hb("hb-bad-regex", "m", 0, regex="[", rto=REBALANCE_MS, owned=(), message=False)
    s.hb("hb-unknown-assignor", "m", 0, topics=(TOPIC,), rto=REBALANCE_MS, owned=(),
         assignor="nope")
    s.hb("hb-empty-instance-id", "m", 0, topics=(TOPIC,), rto=REBALANCE_MS, owned=(),
         instance="")
    s.hb("hb-unknown-group-epoch-5", "m", 5, owned=())
    s.hb("hb-unknown-group-leave", "m", -1)
    s.describe("cgd-unknown-group")
    s.describe("cgd-empty-group-id", group="")


def rebalance(s: Script) -> tuple[Any, Any]:
    a = s.join("hb-join-a", "a")
    s.describe("cgd-a-alone")
    s.hb("hb-a-steady", "a", a.member_epoch, owned=tuple(range(PARTITIONS)))
    b = s.join("hb-join-b", "b")
    s.describe("cgd-b-joined")
    time.sleep(ASSIGNMENT_WAIT_S)
    a2 = s.hb("hb-a-asked-to-revoke", "a", a.member_epoch, owned=tuple(range(PARTITIONS)))
    s.describe("cgd-reconciling")
    kept = tuple(sorted(p for t in a2.assignment.topic_partitions for p in t.partitions))
    s.hb("hb-b-waits-for-release", "b", b.member_epoch, owned=())
    a3 = s.hb("hb-a-revoked", "a", a.member_epoch, owned=kept)
    b3 = s.hb("hb-b-gets-released", "b", b.member_epoch, owned=())
    s.describe("cgd-stable")
    s.hb("hb-a-epoch-ahead", "a", a3.member_epoch + 1, owned=kept)
    s.hb("hb-a-previous-epoch", "a", a.member_epoch, owned=kept)
    s.hb("hb-a-older-epoch", "a", a.member_epoch - 1, owned=kept)
    s.hb("hb-unknown-member", "zz", a3.member_epoch, owned=())
    return a3, b3


def static_member(s: Script) -> None:
    s1 = s.join("hb-static-s1-joins", "s1", instance="i1")
    s.join("hb-static-s2-same-instance", "s2", instance="i1")
    s.hb("hb-static-s1-wrong-instance", "s1", s1.member_epoch, instance="i9", owned=())
    s.hb("hb-static-s2-as-s1", "s2", s1.member_epoch, instance="i1", owned=())
    s.hb("hb-static-s1-leaves-for-now", "s1", -2, instance="i1")
    s.describe("cgd-static-away")
    s.join("hb-static-s2-takes-over", "s2", instance="i1")
    s.describe("cgd-static-back")
    s.hb("hb-static-s2-leaves", "s2", -1, instance="i1")


def offsets(s: Script, b_epoch: int) -> None:
    s.commit("oc-member", "b", b_epoch)
    s.commit("oc-newer-epoch", "b", 99)
    s.commit("oc-older-epoch", "b", 1)
    # KIP-1251 (Kafka 4.3+): a's first epoch (2, as hb-join-a shows) commits the
    # partition 0 it has held since then
    s.commit("oc-previous-epoch-partition-held-since", "a", 2)
    s.commit("oc-unknown-member", "nobody", b_epoch)
    s.commit("oc-no-member", "", -1)
    s.fetch("of-member", "b", b_epoch)
    s.fetch("of-newer-epoch", "b", 99)
    s.fetch("of-unknown-member", "nobody", b_epoch)
    s.fetch("of-no-member", None, -1)


def java_admin(s: Script, bootstrap: str, clients_cp: str) -> None:
    run = run_java(clients_cp, f"{PKG}.DescribeConsumerGroup", bootstrap, s.group, timeout=60)
    lines = run.json_lines()
    assert run.returncode == 0 and lines, run.explain()
    s.out["admin-describe"] = (json.dumps(lines[-1], sort_keys=True).replace(s.run, "<run>"),)


def classic_apis(s: Script) -> None:
    listed = s.conn.call(ListGroupsRequest(states_filter=(), types_filter=())).groups
    s.out["lg-group"] = tuple((g.protocol_type, g.group_state, g.group_type)
                              for g in listed if g.group_id == s.group)
    listed = s.conn.call(ListGroupsRequest(states_filter=(), types_filter=("consumer",))).groups
    s.out["lg-consumer-type"] = tuple(g.group_id.replace(s.run, "<run>") for g in listed
                                      if s.run in g.group_id)
    d = s.conn.call(DescribeGroupsRequest(groups=(s.group,),
                                          include_authorized_operations=False)).groups[0]
    s.out["dg-consumer-group"] = (int(d.error_code), d.group_state, d.protocol_type,
                                  len(d.members))
    s.out["jg-other-protocol"] = (int(s.join_classic(s.group, "other").error_code),)
    deleted = s.conn.call(DeleteGroupsRequest(groups_names=(s.group,))).results[0]
    s.out["dlg-non-empty"] = (int(deleted.error_code),)
    mixed_group(s)
    share = s.conn.call(ShareGroupHeartbeatRequest(
        group_id=s.group, member_id=str(uuid.uuid4()), member_epoch=0, rack_id=None,
        subscribed_topic_names=(TOPIC,)))
    s.out["share-hb-consumer-group"] = (int(share.error_code), s.norm(share.error_message))


def mixed_group(s: Script) -> None:
    """A classic consumer joins the consumer group (Kafka 4.4's mixed groups)."""
    def join(member: str) -> Any:
        return s.conn.call(join_req.JoinGroupRequest(
            group_id=s.group, session_timeout=datetime.timedelta(seconds=30),
            rebalance_timeout=datetime.timedelta(seconds=30), member_id=member,
            group_instance_id=None, protocol_type="consumer",
            protocols=(join_req.JoinGroupRequestProtocol(
                name="range", metadata=encode_subscription((TOPIC,))),), reason=None))
    first = join("")
    s.out["jg-classic-member-id-required"] = (int(first.error_code), bool(first.member_id))
    joined = join(first.member_id)
    s.out["jg-classic-joins-consumer-group"] = (
        int(joined.error_code), joined.protocol_type, joined.protocol_name,
        joined.leader == joined.member_id, len(joined.members), joined.skip_assignment)
    described = s.conn.call(ConsumerGroupDescribeRequest(
        group_ids=(s.group,), include_authorized_operations=False)).groups[0]
    s.out["cgd-with-classic-member"] = tuple(sorted(
        ("<classic>" if m.member_id == first.member_id else m.member_id, m.member_type,
         tuple(m.subscribed_topic_names)) for m in described.members))
    left = s.conn.call(leave_req.LeaveGroupRequest(group_id=s.group, members=(
        leave_req.MemberIdentity(member_id=first.member_id, group_instance_id=None,
                                 reason=None),)))
    s.out["lv-classic-member-leaves"] = (int(left.error_code),
                                         tuple(int(m.error_code) for m in left.members))


def namespace(s: Script) -> None:
    """A live classic group (protocol type "other": no online upgrade on
    Kafka), a group with offsets only, an empty consumer group."""
    first = s.join_classic(s.classic, "other")
    joined = s.join_classic(s.classic, "other", first.member_id)
    s.conn.call(sync_req.SyncGroupRequest(
        group_id=s.classic, generation_id=joined.generation_id, member_id=joined.member_id,
        group_instance_id=None, protocol_type="other", protocol_name="p", assignments=()))
    s.join("hb-live-classic-group", "c1", group=s.classic)
    s.describe("cgd-live-classic-group", group=s.classic)
    s.commit("oc-offsets-only", "", -1, group=s.offsets_only)
    s.join("hb-offsets-only-group", "o1", group=s.offsets_only)
    s.describe("cgd-offsets-only-group", group=s.offsets_only)
    s.fetch("of-offsets-kept", None, -1, group=s.offsets_only)
    e1 = s.join("hb-empty-group-member", "e1", group=s.empty)
    s.hb("hb-empty-group-member-leaves", "e1", -1, group=s.empty)
    s.describe("cgd-empty-consumer-group", group=s.empty)
    del e1
    s.out["jg-empty-consumer-group"] = (int(s.join_classic(s.empty, "other").error_code),)


def leave_and_delete(s: Script) -> None:
    s.hb("hb-a-leaves", "a", -1)
    s.hb("hb-b-leaves", "b", -1)
    s.hb("hb-b-leaves-again", "b", -1)
    s.describe("cgd-empty")
    deleted = s.conn.call(DeleteGroupsRequest(groups_names=(s.group,))).results[0]
    s.out["dlg-empty"] = (int(deleted.error_code),)
    s.describe("cgd-deleted")


def run_script(bootstrap: str, clients_cp: str, settle_s: float = 0.0) -> dict[str, Answer]:
    host, port = bootstrap.rsplit(":", 1)
    conn = Connection(host, int(port), 15.0)
    try:
        s = Script(conn, uuid.uuid4().hex[:8], settle_s)
        s.setup()
        bad_requests(s)
        _, b = rebalance(s)
        static_member(s)
        offsets(s, b.member_epoch)
        java_admin(s, bootstrap, clients_cp)
        classic_apis(s)
        namespace(s)
        leave_and_delete(s)
    finally:
        conn.close()
    return s.out


STEPS = (
    "hb-empty-member-id", "hb-empty-group-id", "hb-join-without-rebalance-timeout",
    "hb-join-without-owned", "hb-join-owning-partitions", "hb-join-without-subscription",
    "hb-epoch-minus-3", "hb-static-leave-without-instance", "hb-bad-regex",
    "hb-unknown-assignor", "hb-empty-instance-id", "hb-unknown-group-epoch-5",
    "hb-unknown-group-leave", "cgd-unknown-group", "cgd-empty-group-id",
    "hb-join-a", "cgd-a-alone", "hb-a-steady", "hb-join-b", "cgd-b-joined",
    "hb-a-asked-to-revoke", "cgd-reconciling", "hb-b-waits-for-release", "hb-a-revoked",
    "hb-b-gets-released", "cgd-stable", "hb-a-epoch-ahead", "hb-a-previous-epoch",
    "hb-a-older-epoch", "hb-unknown-member",
    "hb-static-s1-joins", "hb-static-s2-same-instance", "hb-static-s1-wrong-instance",
    "hb-static-s2-as-s1", "hb-static-s1-leaves-for-now", "cgd-static-away",
    "hb-static-s2-takes-over", "cgd-static-back", "hb-static-s2-leaves",
    "oc-member", "oc-newer-epoch", "oc-older-epoch",
    "oc-previous-epoch-partition-held-since", "oc-unknown-member", "oc-no-member",
    "of-member", "of-newer-epoch", "of-unknown-member", "of-no-member", "admin-describe",
    "lg-group", "lg-consumer-type", "dg-consumer-group", "jg-other-protocol", "dlg-non-empty",
    "jg-classic-member-id-required", "jg-classic-joins-consumer-group",
    "cgd-with-classic-member", "lv-classic-member-leaves", "share-hb-consumer-group",
    "hb-live-classic-group", "cgd-live-classic-group", "oc-offsets-only",
    "hb-offsets-only-group", "cgd-offsets-only-group", "of-offsets-kept",
    "hb-empty-group-member", "hb-empty-group-member-leaves", "cgd-empty-consumer-group",
    "jg-empty-consumer-group",
    "hb-a-leaves", "hb-b-leaves", "hb-b-leaves-again", "cgd-empty", "dlg-empty", "cgd-deleted",
)


# -- fixtures and tests ------------------------------------------------------------------


@pytest.fixture(scope="module")
def kafka_answers(kafka_reference: KafkaReference, clients_cp: str) -> dict[str, Answer]:
    return run_script(kafka_reference.bootstrap, clients_cp, KAFKA_TOPIC_SETTLE_S)


@pytest.fixture(scope="module")
def kcompat_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from running(Broker(tmp_path_factory.mktemp("kip848-diff"), extra_args=FAST_BROKER_ARGS))


@pytest.fixture(scope="module")
def kcompat_answers(kcompat_broker: Broker, clients_cp: str) -> dict[str, Answer]:
    return run_script(kcompat_broker.bootstrap, clients_cp)


#: Where kcompat answers otherwise than Kafka 4.4 (strict: a fix shows as XPASS).
DIFFERENT: dict[str, str] = {}


def _step_params() -> list[Any]:
    return [pytest.param(step, marks=pytest.mark.xfail(strict=True, reason=DIFFERENT[step]))
            if step in DIFFERENT else step for step in STEPS]


@pytest.mark.parametrize("step", _step_params())
def test_step_matches_kafka(kafka_answers: dict[str, Answer],
                            kcompat_answers: dict[str, Answer], step: str) -> None:
    assert kcompat_answers.get(step) == kafka_answers.get(step), step


def test_every_step_ran(kafka_answers: dict[str, Answer]) -> None:
    assert sorted(kafka_answers) == sorted(STEPS)
