"""Each API family checked as Kafka 4.4 checks it (``handlers/_authz``): an
in-process broker with the StandardAuthorizer and ``super.users=User:admin``;
the admin grants ACLs through CreateAcls, then alice (granted) and bob (nothing)
send the same requests. Every answer is encoded with kio and read back. The
same matrix against Apache Kafka 4.4 itself is
compat_tests/java/test_authorization_differential.py."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode as E
from kio.serial import entity_reader

from kcompat.broker.config import broker_config
from kcompat.broker.handlers import HANDLERS
from kcompat.broker.host.broker import Broker
from kcompat.broker.host.context import RequestContext
from kcompat.security import acl
from kcompat.security.acl import Operation as Op
from kcompat.security.acl import PatternType as P
from kcompat.security.acl import ResourceType as R
from kcompat.testing import running
from kcompat.wire import codec
from kcompat.wire import versions as v

ADMIN, ALICE, BOB = "User:admin", "User:alice", "User:bob"
S5 = datetime.timedelta(seconds=5)
S10 = datetime.timedelta(seconds=10)
ALLOW, DENY = 3, 2  # AclPermissionType codes
ALL_CLUSTER = acl.bitfield(acl.SUPPORTED_OPERATIONS[R.CLUSTER])


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    cfg = broker_config.load(None, {
        "log.dirs": str(tmp_path), "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1", "group.initial.rebalance.delay.ms": "0",
        "authorizer.class.name": acl.STANDARD_AUTHORIZER, "super.users": ADMIN}, {})
    b = Broker(cfg)
    for name in ("t", "secret"):
        running.run(b, lambda name=name: running.create_topic(b, name, 1))  # type: ignore[misc]
    yield b
    b.close()


async def call(broker: Broker, principal: str, api: int, version: int, **fields: Any) -> Any:
    """The handler's answer to ``principal`` connected from 127.0.0.1, as the
    client reads it back (kio decodes the zero id as None)."""
    request = codec.build(codec.request_class(api, version), **fields)
    ctx = RequestContext(broker, api, version, 1, "cli", "/127.0.0.1", principal)
    response = await HANDLERS[api](ctx, request)
    raw = codec.encode_response(api, version, 1, response)
    decoded, _ = entity_reader(type(response))(raw, 9 if codec.is_flexible(api, version) else 8)
    assert codec.encode_response(api, version, 1, decoded) == raw
    return decoded


async def grant(broker: Broker, *acls: tuple[R, str, P, str, Op, int], host: str = "*") -> None:
    m = codec.request_module(v.CREATE_ACLS, 3)
    r = await call(broker, ADMIN, v.CREATE_ACLS, 3, creations=tuple(m.AclCreation(
        resource_type=rt, resource_name=name, resource_pattern_type=pt, principal=who,
        host=host, operation=op, permission_type=perm) for rt, name, pt, who, op, perm in acls))
    assert [x.error_code for x in r.results] == [E.none] * len(acls)


def lit(rt: R, name: str, who: str, op: Op, perm: int = ALLOW) -> tuple[R, str, P, str, Op, int]:
    return rt, name, P.LITERAL, who, op, perm


def scenario(broker: Broker, body: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await running.start(nursery, broker)
            await body()
            nursery.cancel_scope.cancel()
    trio.run(main)


# -- list offsets (produce and fetch: test_authorization_produce_fetch.py) --------------

def test_list_offsets_and_leader_epochs(broker: Broker) -> None:
    async def body() -> None:
        await grant(broker, lit(R.TOPIC, "t", ALICE, Op.READ))
        m = codec.request_module(v.LIST_OFFSETS, 7)
        for who, code in ((ALICE, E.none), (BOB, E.topic_authorization_failed)):
            r = await call(broker, who, v.LIST_OFFSETS, 7, replica_id=-1, isolation_level=0,
                           topics=(m.ListOffsetsTopic(name="t", partitions=(
                               m.ListOffsetsPartition(partition_index=0, timestamp=-1),)),))
            p = r.topics[0].partitions[0]
            assert (p.error_code, p.offset) == (code, 0 if code == E.none else -1)
        m = codec.request_module(v.OFFSET_FOR_LEADER_EPOCH, 4)
        for who, code in ((ALICE, E.none), (BOB, E.topic_authorization_failed)):
            r = await call(broker, who, v.OFFSET_FOR_LEADER_EPOCH, 4, replica_id=-1, topics=(
                m.OffsetForLeaderTopic(topic="t", partitions=(m.OffsetForLeaderPartition(
                    partition=0, current_leader_epoch=-1, leader_epoch=0),)),))
            assert r.topics[0].partitions[0].error_code == code
    scenario(broker, body)


# -- metadata --------------------------------------------------------------------------

def test_metadata_hides_and_refuses(broker: Broker) -> None:
    async def body() -> None:
        await grant(broker, lit(R.TOPIC, "t", ALICE, Op.DESCRIBE),
                    (R.TOPIC, "new-", P.PREFIXED, ALICE, Op.DESCRIBE, ALLOW),
                    (R.TOPIC, "auto-", P.PREFIXED, ALICE, Op.ALL, ALLOW))
        m = codec.request_module(v.METADATA, 10)
        r = await call(broker, ALICE, v.METADATA, 10, topics=None,
                       allow_auto_topic_creation=True, include_cluster_authorized_operations=True,
                       include_topic_authorized_operations=True)
        assert [t.name for t in r.topics] == ["t"]  # secret left out
        assert r.topics[0].topic_authorized_operations == acl.bitfield([Op.DESCRIBE])
        assert r.cluster_authorized_operations == 0  # no DESCRIBE on the cluster
        r = await call(broker, ALICE, v.METADATA, 10, topics=tuple(
            m.MetadataRequestTopic(name=n, topic_id=None)
            for n in ("secret", "new-x", "t", "auto-x")),
            allow_auto_topic_creation=True, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=True)
        # Kafka's order: described, then not creatable, then not describable
        assert [(t.name, t.error_code) for t in r.topics] == [
            ("t", E.none), ("auto-x", E.leader_not_available),
            ("new-x", E.topic_authorization_failed), ("secret", E.topic_authorization_failed)]
        assert r.topics[-1].topic_authorized_operations == -(1 << 31)
        assert r.cluster_authorized_operations == -(1 << 31)
        r = await call(broker, ADMIN, v.METADATA, 10, topics=None,
                       allow_auto_topic_creation=False,
                       include_cluster_authorized_operations=True,
                       include_topic_authorized_operations=False)
        assert r.cluster_authorized_operations == ALL_CLUSTER
        assert {t.name for t in r.topics} >= {"t", "secret"}
    scenario(broker, body)


# -- groups ----------------------------------------------------------------------------

def test_group_apis(broker: Broker) -> None:
    async def body() -> None:
        await grant(broker, lit(R.GROUP, "g", ALICE, Op.READ), lit(R.TOPIC, "t", ALICE, Op.READ))
        fc = await call(broker, BOB, v.FIND_COORDINATOR, 3, key="g", key_type=0)
        assert (fc.error_code, fc.error_message, fc.node_id) == (
            E.group_authorization_failed, "Group authorization failed.", -1)
        fc = await call(broker, ALICE, v.FIND_COORDINATOR, 3, key="g", key_type=0)
        assert fc.error_code == E.none
        m = codec.request_module(v.JOIN_GROUP, 9)
        join = {"group_id": "g", "session_timeout": S10, "rebalance_timeout": S10,
                "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                "protocols": (m.JoinGroupRequestProtocol(name="range", metadata=b""),),
                "reason": None}
        r = await call(broker, BOB, v.JOIN_GROUP, 9, **join)
        assert (r.error_code, r.protocol_name) == (E.group_authorization_failed, None)
        r = await call(broker, ALICE, v.JOIN_GROUP, 9, **join)
        assert r.error_code == E.member_id_required
        for key, version, fields in (
                (v.HEARTBEAT, 4, {"generation_id": 1, "member_id": "m",
                                  "group_instance_id": None}),
                (v.SYNC_GROUP, 5, {"generation_id": 1, "member_id": "m", "protocol_type": None,
                                   "protocol_name": None, "group_instance_id": None,
                                   "assignments": ()}),
                (v.LEAVE_GROUP, 5, {"members": ()})):
            r = await call(broker, BOB, key, version, group_id="g", **fields)
            assert r.error_code == E.group_authorization_failed, key
        for who, code in ((BOB, E.group_authorization_failed),
                          (ALICE, E.topic_authorization_failed)):  # secret: no DESCRIBE
            r = await call(broker, who, v.CONSUMER_GROUP_HEARTBEAT, 0, group_id="g",
                           member_id="m-1", member_epoch=0, rebalance_timeout=S10,
                           server_assignor=None, subscribed_topic_names=("t", "secret"),
                           topic_partitions=())
            assert r.error_code == code, who
        await offsets(broker)
        await describe_list_delete(broker)
    scenario(broker, body)


async def offsets(broker: Broker) -> None:
    m = codec.request_module(v.OFFSET_COMMIT, 8)

    async def commit(who: str) -> list[tuple[str, E]]:
        r = await call(broker, who, v.OFFSET_COMMIT, 8, group_id="g",
                       generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                       topics=tuple(m.OffsetCommitRequestTopic(name=n, partitions=(
                           m.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                          committed_leader_epoch=-1,
                                                          committed_metadata=""),))
                           for n in ("t", "secret")))
        return [(t.name, t.partitions[0].error_code) for t in r.topics]

    assert await commit(BOB) == [("t", E.group_authorization_failed),
                                 ("secret", E.group_authorization_failed)]
    assert await commit(ALICE) == [("secret", E.topic_authorization_failed), ("t", E.none)]
    f = codec.request_module(v.OFFSET_FETCH, 8)
    asked = (f.OffsetFetchRequestTopics(name="secret", partition_indexes=(0,)),
             f.OffsetFetchRequestTopics(name="t", partition_indexes=(0,)))
    r = await call(broker, ALICE, v.OFFSET_FETCH, 8, require_stable=False, groups=(
        f.OffsetFetchRequestGroup(group_id="g", topics=asked),
        f.OffsetFetchRequestGroup(group_id="h", topics=asked),
        f.OffsetFetchRequestGroup(group_id="g", topics=None)))
    g, h, every = r.groups
    assert [(t.name, t.partitions[0].error_code, t.partitions[0].committed_offset)
            for t in g.topics] == [("t", E.none, 1), ("secret", E.topic_authorization_failed, -1)]
    assert h.error_code == E.group_authorization_failed
    assert [t.name for t in every.topics] == ["t"]  # all offsets: secret's left out
    f1 = codec.request_module(v.OFFSET_FETCH, 1)
    r = await call(broker, BOB, v.OFFSET_FETCH, 1, group_id="g", topics=(
        f1.OffsetFetchRequestTopic(name="t", partition_indexes=(0,)),))
    assert [(p.error_code, p.committed_offset) for t in r.topics for p in t.partitions] == [
        (E.group_authorization_failed, -1)]  # v1: no top-level error field
    d = codec.request_module(v.OFFSET_DELETE, 0)
    r = await call(broker, ALICE, v.OFFSET_DELETE, 0, group_id="g", topics=(
        d.OffsetDeleteRequestTopic(name="t", partitions=(
            d.OffsetDeleteRequestPartition(partition_index=0),)),))
    assert r.error_code == E.group_authorization_failed  # DELETE on the group


async def describe_list_delete(broker: Broker) -> None:
    await grant(broker, lit(R.GROUP, "g", BOB, Op.DELETE))
    r = await call(broker, ALICE, v.DESCRIBE_GROUPS, 5, groups=("h", "g"),
                   include_authorized_operations=True)
    assert [(x.group_id, x.error_code) for x in r.groups] == [
        ("h", E.group_authorization_failed), ("g", E.none)]  # denied first, as Kafka
    assert r.groups[1].authorized_operations == acl.bitfield([Op.READ, Op.DESCRIBE])
    for who, listed in ((ALICE, ["g"]), (BOB, ["g"]), ("User:carol", []), (ADMIN, ["g"])):
        r = await call(broker, who, v.LIST_GROUPS, 4, states_filter=())
        assert [x.group_id for x in r.groups] == listed, who
    r = await call(broker, ALICE, v.DELETE_GROUPS, 2, groups_names=("g",))
    assert r.results[0].error_code == E.group_authorization_failed
    r = await call(broker, BOB, v.DELETE_GROUPS, 2, groups_names=("g",))
    assert r.results[0].error_code == E.none


# -- transactions ----------------------------------------------------------------------

def test_transaction_apis(broker: Broker) -> None:
    async def body() -> None:
        await grant(broker, lit(R.TRANSACTIONAL_ID, "app", ALICE, Op.WRITE),
                    lit(R.TOPIC, "t", ALICE, Op.WRITE), lit(R.TOPIC, "t", ALICE, Op.READ))
        init = {"transaction_timeout": datetime.timedelta(seconds=30), "producer_id": -1,
                "producer_epoch": -1}
        r = await call(broker, BOB, v.INIT_PRODUCER_ID, 4, transactional_id="app", **init)
        assert (r.error_code, r.producer_id) == (E.transactional_id_authorization_failed, -1)
        r = await call(broker, BOB, v.INIT_PRODUCER_ID, 4, transactional_id=None, **init)
        assert r.error_code == E.cluster_authorization_failed  # idempotent: no WRITE anywhere
        r = await call(broker, ALICE, v.INIT_PRODUCER_ID, 4, transactional_id=None, **init)
        assert r.error_code == E.none  # WRITE on a topic is enough (KIP-679)
        r = await call(broker, ALICE, v.INIT_PRODUCER_ID, 4, transactional_id="app", **init)
        pid, epoch = r.producer_id, r.producer_epoch
        assert r.error_code == E.none
        m = codec.request_module(v.ADD_PARTITIONS_TO_TXN, 3)
        add = {"v3_and_below_transactional_id": "app", "v3_and_below_producer_id": pid,
               "v3_and_below_producer_epoch": epoch}
        for who, topics, expected in (
                (BOB, ("t",), [E.transactional_id_authorization_failed]),
                (ALICE, ("t", "secret"), [E.operation_not_attempted,
                                          E.topic_authorization_failed]),
                (ALICE, ("t", "__transaction_state"), [E.operation_not_attempted,
                                                       E.topic_authorization_failed])):
            r = await call(broker, who, v.ADD_PARTITIONS_TO_TXN, 3, **add, v3_and_below_topics=(
                tuple(m.AddPartitionsToTxnTopic(name=n, partitions=(0,)) for n in topics)))
            assert [x.results_by_partition[0].partition_error_code
                    for x in r.results_by_topic_v3_and_below] == expected
        txn = {"transactional_id": "app", "producer_id": pid, "producer_epoch": epoch}
        r = await call(broker, BOB, v.ADD_OFFSETS_TO_TXN, 4, group_id="g", **txn)
        assert r.error_code == E.transactional_id_authorization_failed
        r = await call(broker, ALICE, v.ADD_OFFSETS_TO_TXN, 4, group_id="g", **txn)
        assert r.error_code == E.group_authorization_failed
        c = codec.request_module(v.TXN_OFFSET_COMMIT, 3)
        r = await call(broker, ALICE, v.TXN_OFFSET_COMMIT, 3, group_id="g", generation_id=-1,
                       member_id="", group_instance_id=None, **txn, topics=(
                           c.TxnOffsetCommitRequestTopic(name="t", partitions=(
                               c.TxnOffsetCommitRequestPartition(
                                   partition_index=0, committed_offset=0,
                                   committed_leader_epoch=-1, committed_metadata=""),)),))
        assert r.topics[0].partitions[0].error_code == E.group_authorization_failed
        r = await call(broker, BOB, v.END_TXN, 4, committed=False, **txn)
        assert r.error_code == E.transactional_id_authorization_failed
        r = await call(broker, ALICE, v.END_TXN, 4, committed=False, **txn)
        assert r.error_code == E.invalid_txn_state  # past the check: nothing to abort
        r = await call(broker, BOB, v.DESCRIBE_TRANSACTIONS, 0, transactional_ids=("app",))
        assert r.transaction_states[0].error_code == E.transactional_id_authorization_failed
        r = await call(broker, BOB, v.LIST_TRANSACTIONS, 1, state_filters=(),
                       producer_id_filters=(), duration_filter=-1)
        assert r.transaction_states == ()
        r = await call(broker, ALICE, v.LIST_TRANSACTIONS, 1, state_filters=(),
                       producer_id_filters=(), duration_filter=-1)
        assert [x.transactional_id for x in r.transaction_states] == ["app"]
    scenario(broker, body)


# -- admin -----------------------------------------------------------------------------

def test_topic_admin_apis(broker: Broker) -> None:
    async def body() -> None:
        await grant(broker, (R.TOPIC, "a-", P.PREFIXED, ALICE, Op.CREATE, ALLOW),
                    lit(R.TOPIC, "t", ALICE, Op.DESCRIBE))
        m = codec.request_module(v.CREATE_TOPICS, 7)
        r = await call(broker, ALICE, v.CREATE_TOPICS, 7, validate_only=False, timeout=S5,
                       topics=tuple(m.CreatableTopic(name=n, num_partitions=1,
                                                     replication_factor=1, assignments=(),
                                                     configs=()) for n in ("b-1", "a-1")))
        a1, b1 = r.topics
        assert (a1.name, a1.error_code, a1.topic_config_error_code, a1.configs) == (
            "a-1", E.none, E.topic_authorization_failed, ())  # no DESCRIBE_CONFIGS
        assert (b1.name, b1.error_code, b1.error_message) == (
            "b-1", E.topic_authorization_failed, "Authorization failed.")
        assert "a-1" in broker.state.topics and "b-1" not in broker.state.topics
        d = codec.request_module(v.DELETE_TOPICS, 6)
        r = await call(broker, ALICE, v.DELETE_TOPICS, 6, timeout=S5, topics=(
            d.DeleteTopicState(name="t", topic_id=uuid.UUID(int=0)),
            d.DeleteTopicState(name=None, topic_id=broker.state.topics["secret"].topic_id)))
        assert [(x.name, x.topic_id, x.error_code) for x in r.responses] == [
            ("t", None, E.topic_authorization_failed),  # the zero id
            (None, broker.state.topics["secret"].topic_id, E.topic_authorization_failed)]
        p = codec.request_module(v.CREATE_PARTITIONS, 3)
        r = await call(broker, ALICE, v.CREATE_PARTITIONS, 3, timeout=S5, validate_only=False,
                       topics=(p.CreatePartitionsTopic(name="t", count=2, assignments=None),))
        assert r.results[0].error_code == E.topic_authorization_failed
        dr = codec.request_module(v.DELETE_RECORDS, 2)
        r = await call(broker, ALICE, v.DELETE_RECORDS, 2, timeout=S5, topics=(
            dr.DeleteRecordsTopic(name="t", partitions=(
                dr.DeleteRecordsPartition(partition_index=0, offset=0),)),))
        assert r.topics[0].partitions[0].error_code == E.topic_authorization_failed
        await configs(broker)
    scenario(broker, body)


async def configs(broker: Broker) -> None:
    await grant(broker, lit(R.TOPIC, "secret", ALICE, Op.ALTER_CONFIGS))
    m = codec.request_module(v.DESCRIBE_CONFIGS, 4)
    r = await call(broker, ALICE, v.DESCRIBE_CONFIGS, 4, include_synonyms=False,
                   include_documentation=False, resources=tuple(
                       m.DescribeConfigsResource(resource_type=rt, resource_name=n,
                                                 configuration_keys=None)
                       for rt, n in ((2, "t"), (4, "1"), (2, "secret"), (32, "g"))))
    assert [(x.resource_name, x.error_code, x.error_message) for x in r.results] == [
        ("secret", E.none, ""),  # ALTER_CONFIGS implies DESCRIBE_CONFIGS (Kafka: an empty message)
        ("t", E.topic_authorization_failed, "Topic authorization failed."),
        ("1", E.cluster_authorization_failed, "Cluster authorization failed."),
        ("g", E.group_authorization_failed, "Group authorization failed.")]
    i = codec.request_module(v.INCREMENTAL_ALTER_CONFIGS, 1)
    r = await call(broker, ALICE, v.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False,
                   resources=tuple(i.AlterConfigsResource(
                       resource_type=rt, resource_name=n, configs=(i.AlterableConfig(
                           name="retention.ms", config_operation=0, value="5000"),))
                       for rt, n in ((2, "t"), (2, "secret"))))
    assert [(x.resource_name, x.error_code) for x in r.responses] == [
        ("t", E.topic_authorization_failed), ("secret", E.none)]
    assert broker.state.topics["secret"].configs.get("retention.ms") is not None


def test_cluster_apis_need_cluster_permissions(broker: Broker) -> None:
    async def body() -> None:
        await grant(broker, lit(R.CLUSTER, acl.CLUSTER_NAME, ALICE, Op.DESCRIBE))
        r = await call(broker, BOB, v.DESCRIBE_CLUSTER, 1,
                       include_cluster_authorized_operations=True, endpoint_type=1)
        assert (r.error_code, r.cluster_authorized_operations) == (E.none, 0)
        r = await call(broker, ALICE, v.DESCRIBE_CLUSTER, 1,
                       include_cluster_authorized_operations=True, endpoint_type=1)
        assert r.cluster_authorized_operations == acl.bitfield([Op.DESCRIBE])
        r = await call(broker, BOB, v.DESCRIBE_LOG_DIRS, 4, topics=None)
        assert (r.error_code, r.results) == (E.cluster_authorization_failed, ())
        r = await call(broker, ALICE, v.DESCRIBE_LOG_DIRS, 4, topics=None)
        assert r.error_code == E.none and r.results
        r = await call(broker, BOB, v.LIST_PARTITION_REASSIGNMENTS, 0, timeout_ms=5000,
                       topics=None)
        assert r.error_code == E.cluster_authorization_failed
        e = codec.request_module(v.ELECT_LEADERS, 2)
        r = await call(broker, ALICE, v.ELECT_LEADERS, 2, election_type=0, timeout=S5,
                       topic_partitions=(e.TopicPartitions(topic="t", partitions=(0,)),))
        assert r.error_code == E.cluster_authorization_failed  # ALTER, not DESCRIBE
        assert r.replica_election_results[0].partition_result[0].error_code == \
            E.cluster_authorization_failed
        r = await call(broker, ALICE, v.DESCRIBE_CLIENT_QUOTAS, 1, components=(), strict=False)
        assert (r.error_code, r.entries) == (E.cluster_authorization_failed, None)
        r = await call(broker, ALICE, v.UNREGISTER_BROKER, 0, broker_id=9)
        assert r.error_code == E.cluster_authorization_failed
    scenario(broker, body)


def test_acl_hosts_match_the_client_address(broker: Broker) -> None:
    """An ACL names the host as 1.2.3.4; the connection's host is /1.2.3.4."""
    async def body() -> None:
        await grant(broker, lit(R.TOPIC, "t", ALICE, Op.DESCRIBE), host="127.0.0.1")
        await grant(broker, lit(R.TOPIC, "secret", ALICE, Op.DESCRIBE), host="10.0.0.1")
        m = codec.request_module(v.LIST_OFFSETS, 7)
        r = await call(broker, ALICE, v.LIST_OFFSETS, 7, replica_id=-1, isolation_level=0,
                       topics=tuple(m.ListOffsetsTopic(name=n, partitions=(
                           m.ListOffsetsPartition(partition_index=0, timestamp=-1),))
                           for n in ("t", "secret")))
        assert [t.partitions[0].error_code for t in r.topics] == [
            E.none, E.topic_authorization_failed]
    scenario(broker, body)


@pytest.mark.parametrize(("acls", "allowed"), [
    ([], False),
    ([lit(R.TOPIC, "x", BOB, Op.WRITE)], True),
    ([(R.TOPIC, "x", P.PREFIXED, BOB, Op.ALL, ALLOW)], True),
    ([lit(R.TOPIC, "x", BOB, Op.READ)], False),  # READ is not WRITE
    ([lit(R.TOPIC, "x", BOB, Op.WRITE), lit(R.TOPIC, "*", BOB, Op.WRITE, DENY)], False),
    ([lit(R.TOPIC, "xy", BOB, Op.WRITE), (R.TOPIC, "x", P.PREFIXED, BOB, Op.WRITE, DENY)],
     False),
    ([lit(R.TOPIC, "xy", BOB, Op.WRITE), lit(R.TOPIC, "xz", BOB, Op.WRITE, DENY)], True),
    ([lit(R.CLUSTER, acl.CLUSTER_NAME, BOB, Op.IDEMPOTENT_WRITE)], True),
])
def test_an_idempotent_producer_id_needs_write_somewhere(
        broker: Broker, acls: list[tuple[R, str, P, str, Op, int]], allowed: bool) -> None:
    """InitProducerId without a transactional id: Kafka's authorizeByResourceType."""
    async def body() -> None:
        if acls:
            await grant(broker, *acls)
        r = await call(broker, BOB, v.INIT_PRODUCER_ID, 4, transactional_id=None,
                       transaction_timeout=S5, producer_id=-1, producer_epoch=-1)
        assert r.error_code == (E.none if allowed else E.cluster_authorization_failed)
    scenario(broker, body)


def test_consumer_group_describe_hides_groups_with_hidden_topics(broker: Broker) -> None:
    """Kafka 4.4 describes a KIP-848 group only to a principal that may DESCRIBE
    every topic its members subscribe to or own."""
    async def body() -> None:
        carol = "User:carol"
        await grant(broker, lit(R.GROUP, "cg", ALICE, Op.READ), lit(R.TOPIC, "t", ALICE, Op.READ),
                    lit(R.GROUP, "cg", carol, Op.DESCRIBE))
        r = await call(broker, ALICE, v.CONSUMER_GROUP_HEARTBEAT, 1, group_id="cg",
                       member_id="m-1", member_epoch=0, rebalance_timeout=S10,
                       server_assignor=None, subscribed_topic_names=("t",),
                       subscribed_topic_regex=None, topic_partitions=())
        assert r.error_code == E.none
        for who, code in ((ALICE, E.none), (carol, E.topic_authorization_failed),
                          (BOB, E.group_authorization_failed)):
            r = await call(broker, who, v.CONSUMER_GROUP_DESCRIBE, 1, group_ids=("cg",),
                           include_authorized_operations=True)
            g = r.groups[0]
            assert g.error_code == code, who
            assert len(g.members) == (1 if code == E.none else 0)
        assert g.error_message is None
        r = await call(broker, carol, v.CONSUMER_GROUP_DESCRIBE, 1, group_ids=("cg",),
                       include_authorized_operations=False)
        assert r.groups[0].error_message == ("The group has described topic(s) that the client "
                                             "is not authorized to describe.")
    scenario(broker, body)
