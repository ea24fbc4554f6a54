"""Differential: what an allowed and a denied principal get from each API
family, Apache Kafka 4.4 (StandardAuthorizer) against kcompat, one broker each
with the same Kafka keys: a PLAINTEXT listener (``User:ANONYMOUS``, a super user
there, sets up topics and ACLs and is Kafka's inter-broker listener) and a
SASL_PLAINTEXT one with PLAIN users alice and bob.

alice may WRITE and READ ``orders``, READ the group ``g``, WRITE the
transactional id ``tx`` and CREATE topics prefixed ``a-``; bob may only
DESCRIBE ``orders``. One script (``run_script``) sends the same raw requests as
each of them to both brokers and keeps the error codes (and messages where
Kafka sets one): produce, fetch and list offsets; Metadata by name and for all
topics; a consumer group (FindCoordinator, JoinGroup, OffsetCommit,
OffsetFetch, DescribeGroups, ListGroups); transactional produce
(InitProducerId with and without an id, AddPartitionsToTxn, a transactional
Produce, EndTxn); CreateTopics, DeleteTopics and DescribeConfigs. Lists are
compared sorted where Kafka's order comes from a hash set. Each step is a
test: kcompat's observation must equal Kafka's.
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from compat_tests._broker import Broker, free_port
from compat_tests.java.kafka_reference import KafkaReference
from kcompat.cli._kio import Connection
from kcompat.cli._security import ClientSecurity
from kcompat.security.acl import STANDARD_AUTHORIZER
from kcompat.wire import codec
from kcompat.wire import versions as v
from kcompat.wire.records import encode_batch

pytestmark = pytest.mark.timeout(180)

HOST = "127.0.0.1"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret" user_bob="bob-secret" user_carol="carol-secret";')
S10 = datetime.timedelta(seconds=10)
#: codes a request meets while a coordinator or a new topic's leader is being set up
TRANSIENT = {"COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS",
             "NOT_LEADER_OR_FOLLOWER", "LEADER_NOT_AVAILABLE", "UNKNOWN_TOPIC_OR_PARTITION",
             "CONCURRENT_TRANSACTIONS"}
T, G, C, TX = 2, 3, 4, 5
LITERAL, PREFIXED = 3, 4
READ, WRITE, CREATE, DESCRIBE, ALLOW = 3, 4, 5, 8, 3
ACLS = [(T, "orders", LITERAL, "User:alice", WRITE), (T, "orders", LITERAL, "User:alice", READ),
        (G, "g", LITERAL, "User:alice", READ), (TX, "tx", LITERAL, "User:alice", WRITE),
        (T, "a-", PREFIXED, "User:alice", CREATE), (T, "a-", PREFIXED, "User:alice", DESCRIBE),
        (T, "a-auto", LITERAL, "User:alice", 10),  # DESCRIBE_CONFIGS
        (T, "orders", LITERAL, "User:bob", DESCRIBE), (T, "m-", PREFIXED, "User:bob", DESCRIBE),
        (G, "cg", LITERAL, "User:alice", READ), (G, "cg", LITERAL, "User:carol", DESCRIBE),
        (G, "sg", LITERAL, "User:alice", READ), (G, "rg", LITERAL, "User:alice", READ)]
Obs = Any


def settings(ports: dict[str, int]) -> dict[str, str]:
    names = ("PLAINTEXT", "SASL_PLAINTEXT")
    return {
        "listeners": ",".join(f"{n}://{HOST}:{ports[n]}" for n in names),
        "advertised.listeners": ",".join(f"{n}://{HOST}:{ports[n]}" for n in names),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": "User:ANONYMOUS",
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
        # the least Kafka allows: an ACL change reaches a regex subscription within 10 s
        "group.consumer.regex.refresh.interval.ms": "10000",
    }


def req(api: int, version: int, **fields: Any) -> Any:
    return codec.build(codec.request_class(api, version), **fields)


def mod(api: int, version: int) -> Any:
    return codec.request_module(api, version)


def name(code: Any) -> str:
    return str(getattr(code, "name", code)).upper()


def until(ask: Callable[[], Any], done: Callable[[Any], bool], what: str) -> Any:
    """Ask again until ``done`` (a coordinator or leader being set up), 20 s."""
    deadline = time.monotonic() + 20
    while True:
        answer = ask()
        if done(answer):
            return answer
        assert time.monotonic() < deadline, f"{what}: {answer}"
        time.sleep(0.1)


# -- the set-up, as the PLAINTEXT super user --------------------------------------------

def set_up(admin: Connection) -> None:
    m = mod(v.CREATE_TOPICS, 7)
    r = admin.call(req(v.CREATE_TOPICS, 7, timeout=S10, validate_only=False, topics=tuple(
        m.CreatableTopic(name=n, num_partitions=1, replication_factor=1, assignments=(),
                         configs=()) for n in ("orders", "secret"))))
    assert [name(t.error_code) for t in r.topics] == ["NONE", "NONE"]
    a = mod(v.CREATE_ACLS, 3)
    r = admin.call(req(v.CREATE_ACLS, 3, creations=tuple(a.AclCreation(
        resource_type=rt, resource_name=n, resource_pattern_type=pt, principal=who, host="*",
        operation=op, permission_type=ALLOW) for rt, n, pt, who, op in ACLS)))
    assert {name(x.error_code) for x in r.results} == {"NONE"}
    until(lambda: admin.call(req(v.DESCRIBE_ACLS, 3, resource_type_filter=1,
                                 resource_name_filter=None, pattern_type_filter=1,
                                 principal_filter=None, host_filter=None, operation=1,
                                 permission_type=1)),
          lambda r: sum(len(x.acls) for x in r.resources) == len(ACLS), "ACLs in force")
    for topic in ("orders", "secret"):
        until(lambda t=topic: leader(admin, t), lambda n: n >= 0, f"{topic}'s leader")


def leader(conn: Connection, topic: str) -> int:
    m = mod(v.METADATA, 12)
    r = conn.call(req(v.METADATA, 12, topics=(m.MetadataRequestTopic(name=topic, topic_id=None),),
                      allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    parts = r.topics[0].partitions
    return int(parts[0].leader_id) if parts else -1


# -- the steps, as alice or bob ---------------------------------------------------------

def produce(conn: Connection, topics: tuple[str, ...], tid: str | None = None,
            records: bytes | None = None) -> Obs:
    m = mod(v.PRODUCE, 9)
    batch = records or encode_batch([(None, b"v", (), int(time.time() * 1000))])
    request = req(v.PRODUCE, 9, transactional_id=tid, acks=-1, timeout=S10, topic_data=tuple(
        m.TopicProduceData(name=t, partition_data=(m.PartitionProduceData(index=0,
                                                                          records=batch),))
        for t in topics))
    r = until(lambda: conn.call(request), lambda r: not {
        name(p.error_code) for t in r.responses for p in t.partition_responses} & TRANSIENT,
        "produce")
    return sorted((t.name, name(p.error_code)) for t in r.responses
                  for p in t.partition_responses)


def fetch(conn: Connection, topics: tuple[str, ...]) -> Obs:
    m = mod(v.FETCH, 12)
    r = conn.call(req(v.FETCH, 12, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1,
                      max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                      topics=tuple(m.FetchTopic(topic=t, partitions=(m.FetchPartition(
                          partition=0, current_leader_epoch=-1, fetch_offset=0,
                          log_start_offset=-1, partition_max_bytes=1 << 20),))
                          for t in topics), forgotten_topics_data=(), rack_id=""))
    return sorted((t.topic, name(p.error_code), p.high_watermark) for t in r.responses
                  for p in t.partitions)


def list_offsets(conn: Connection) -> Obs:
    m = mod(v.LIST_OFFSETS, 7)
    r = conn.call(req(v.LIST_OFFSETS, 7, replica_id=-1, isolation_level=0, topics=tuple(
        m.ListOffsetsTopic(name=t, partitions=(m.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=-1, timestamp=-1),))
        for t in ("orders", "secret"))))
    return sorted((t.name, name(p.error_code), p.offset) for t in r.topics for p in t.partitions)


def metadata(conn: Connection, topics: tuple[str, ...] | None) -> Obs:
    m = mod(v.METADATA, 12)
    r = conn.call(req(v.METADATA, 12, topics=None if topics is None else tuple(
        m.MetadataRequestTopic(name=t, topic_id=None) for t in topics),
        allow_auto_topic_creation=False, include_topic_authorized_operations=True))
    return sorted((t.name, name(t.error_code), t.topic_authorized_operations)
                  for t in r.topics if not t.is_internal)


def find_coordinator(conn: Connection, key_type: int, key: str) -> Obs:
    """The answer once the coordinator is set up (Kafka answers
    COORDINATOR_NOT_AVAILABLE while it creates the internal topic)."""
    r = until(lambda: conn.call(req(v.FIND_COORDINATOR, 4, key_type=key_type,
                                    coordinator_keys=(key,))),
              lambda r: name(r.coordinators[0].error_code) not in TRANSIENT, "coordinator")
    found = [(name(c.error_code), c.error_message) for c in r.coordinators]
    old = conn.call(req(v.FIND_COORDINATOR, 3, key_type=key_type, key=key))
    return [*found, (name(old.error_code), old.error_message)]


def auto_create(conn: Connection, topic: str) -> Obs:
    """Metadata asking to auto-create ``topic``: its code once settled (a topic
    being created is LEADER_NOT_AVAILABLE a moment)."""
    m = mod(v.METADATA, 12)
    r = until(lambda: conn.call(req(v.METADATA, 12, topics=(m.MetadataRequestTopic(
        name=topic, topic_id=None),), allow_auto_topic_creation=True,
        include_topic_authorized_operations=False)),
        lambda r: name(r.topics[0].error_code) not in TRANSIENT, "auto-creation")
    return [(t.name, name(t.error_code), len(t.partitions)) for t in r.topics]


def group(conn: Connection) -> Obs:
    obs: dict[str, Obs] = {}
    obs["find"] = find_coordinator(conn, 0, "g")
    j = mod(v.JOIN_GROUP, 9)
    r = until(lambda: conn.call(req(
        v.JOIN_GROUP, 9, group_id="g", session_timeout=S10, rebalance_timeout=S10, member_id="",
        group_instance_id=None, protocol_type="consumer",
        protocols=(j.JoinGroupRequestProtocol(name="range", metadata=b""),), reason=None)),
        lambda r: name(r.error_code) not in TRANSIENT, "join group")
    # kcompat answers MEMBER_ID_REQUIRED with protocol name "" where Kafka 4.4 answers
    # null (not authorization's): the name compared on the refusal only
    refused = name(r.error_code) == "GROUP_AUTHORIZATION_FAILED"
    obs["join"] = (name(r.error_code), r.protocol_name if refused else "")
    c = mod(v.OFFSET_COMMIT, 8)
    r = until(lambda: conn.call(req(
        v.OFFSET_COMMIT, 8, group_id="g", generation_id_or_member_epoch=-1, member_id="",
        group_instance_id=None, topics=tuple(c.OffsetCommitRequestTopic(name=t, partitions=(
            c.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                           committed_leader_epoch=-1, committed_metadata=""),))
            for t in ("orders", "secret")))),
        lambda r: not {name(p.error_code) for t in r.topics for p in t.partitions} & TRANSIENT,
        "offset commit")
    # in answer order: Kafka lists the topics it refused first
    obs["commit"] = [(t.name, name(p.error_code)) for t in r.topics for p in t.partitions]
    o = mod(v.OFFSET_FETCH, 8)
    r = conn.call(req(v.OFFSET_FETCH, 8, require_stable=False, groups=(o.OffsetFetchRequestGroup(
        group_id="g", topics=tuple(o.OffsetFetchRequestTopics(name=t, partition_indexes=(0,))
                                   for t in ("secret", "orders"))),)))
    # in answer order: Kafka lists the topics it refused last
    obs["fetch_offsets"] = [(name(g.error_code), [
        (t.name, name(p.error_code), p.committed_offset) for t in g.topics for p in t.partitions])
        for g in r.groups]
    for version in (1, 7):  # one group, before v8: the group's error per partition / on top
        o = mod(v.OFFSET_FETCH, version)
        r = conn.call(req(v.OFFSET_FETCH, version, group_id="g", require_stable=False,
                          topics=(o.OffsetFetchRequestTopic(name="orders",
                                                            partition_indexes=(0,)),)))
        obs[f"fetch_offsets_v{version}"] = (name(getattr(r, "error_code", 0)), [
            (t.name, name(p.error_code), p.committed_offset) for t in r.topics
            for p in t.partitions])
    r = conn.call(req(v.DESCRIBE_GROUPS, 5, groups=("g",), include_authorized_operations=True))
    obs["describe"] = [(g.group_id, name(g.error_code), g.authorized_operations)
                       for g in r.groups]
    r = conn.call(req(v.LIST_GROUPS, 4, states_filter=()))
    obs["list"] = sorted(g.group_id for g in r.groups)
    return obs


def transactions(conn: Connection) -> Obs:
    obs: dict[str, Obs] = {}
    init = {"transaction_timeout": datetime.timedelta(seconds=30), "producer_id": -1,
            "producer_epoch": -1}
    r = until(lambda: conn.call(req(v.INIT_PRODUCER_ID, 4, transactional_id=None, **init)),
              lambda r: name(r.error_code) not in TRANSIENT, "idempotent producer id")
    obs["init_idempotent"] = name(r.error_code)
    obs["find"] = find_coordinator(conn, 1, "tx")
    r = until(lambda: conn.call(req(v.INIT_PRODUCER_ID, 4, transactional_id="tx", **init)),
              lambda r: name(r.error_code) not in TRANSIENT, "init producer id")
    obs["init"] = name(r.error_code)
    pid, epoch = (r.producer_id, r.producer_epoch) if obs["init"] == "NONE" else (7, 0)
    a = mod(v.ADD_PARTITIONS_TO_TXN, 3)
    r = conn.call(req(v.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id="tx",
                      v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                      v3_and_below_topics=tuple(a.AddPartitionsToTxnTopic(name=t, partitions=(0,))
                                                for t in ("orders", "secret"))))
    obs["add_partitions"] = sorted((t.name, name(p.partition_error_code))
                                   for t in r.results_by_topic_v3_and_below
                                   for p in t.results_by_partition)
    batch = encode_batch([(None, b"t", (), int(time.time() * 1000))], producer_id=pid,
                         producer_epoch=epoch, base_sequence=0, transactional=True)
    obs["produce"] = produce(conn, ("orders",), tid="tx", records=batch)
    r = conn.call(req(v.ADD_OFFSETS_TO_TXN, 4, transactional_id="tx", producer_id=pid,
                      producer_epoch=epoch, group_id="other"))
    obs["add_offsets"] = name(r.error_code)
    t = mod(v.TXN_OFFSET_COMMIT, 3)
    r = conn.call(req(v.TXN_OFFSET_COMMIT, 3, transactional_id="tx", group_id="g",
                      producer_id=pid, producer_epoch=epoch, generation_id=-1, member_id="",
                      group_instance_id=None, topics=tuple(t.TxnOffsetCommitRequestTopic(
                          name=n, partitions=(t.TxnOffsetCommitRequestPartition(
                              partition_index=0, committed_offset=0, committed_leader_epoch=-1,
                              committed_metadata=""),)) for n in ("orders", "secret"))))
    obs["txn_offset_commit"] = sorted((x.name, name(p.error_code))
                                      for x in r.topics for p in x.partitions)
    r = conn.call(req(v.END_TXN, 4, transactional_id="tx", producer_id=pid,
                      producer_epoch=epoch, committed=False))
    obs["end"] = name(r.error_code)
    return obs


def topic_admin(conn: Connection, new: tuple[str, ...]) -> Obs:
    obs: dict[str, Obs] = {}
    m = mod(v.CREATE_TOPICS, 7)
    r = conn.call(req(v.CREATE_TOPICS, 7, timeout=S10, validate_only=False, topics=tuple(
        m.CreatableTopic(name=n, num_partitions=1, replication_factor=1, assignments=(),
                         configs=()) for n in new)))
    obs["create"] = sorted((t.name, name(t.error_code), t.error_message,
                            name(t.topic_config_error_code), len(t.configs)) for t in r.topics)
    d = mod(v.DELETE_TOPICS, 6)
    r = conn.call(req(v.DELETE_TOPICS, 6, timeout=S10, topics=tuple(
        d.DeleteTopicState(name=n, topic_id=uuid.UUID(int=0)) for n in ("orders", "secret"))))
    obs["delete"] = sorted((t.name, name(t.error_code), t.error_message) for t in r.responses)
    c = mod(v.DESCRIBE_CONFIGS, 4)
    for rt, n in ((T, "orders"), (T, "a-auto"), (4, "1"), (32, "g")):  # ConfigResource types
        r = conn.call(req(v.DESCRIBE_CONFIGS, 4, include_synonyms=False,
                          include_documentation=False, resources=(c.DescribeConfigsResource(
                              resource_type=rt, resource_name=n, configuration_keys=None),)))
        obs[f"describe_configs_{rt}_{n}"] = [
            (x.resource_type, x.resource_name, name(x.error_code), x.error_message,
             len(x.configs) > 0) for x in r.results]
    r = conn.call(req(v.DESCRIBE_CONFIGS, 4, include_synonyms=False, include_documentation=False,
                      resources=tuple(c.DescribeConfigsResource(
                          resource_type=T, resource_name=n, configuration_keys=("retention.ms",))
                          for n in ("secret", "a-auto"))))
    # in answer order: Kafka lists the resources it refused last
    obs["describe_configs_mixed"] = [(x.resource_name, name(x.error_code)) for x in r.results]
    return obs


def codes(r: Any, *path: str) -> Obs:
    """(code, message) of every entry down ``path`` (attribute names; the last
    one's entries carry error_code / error_message), in answer order."""
    items = [r]
    for attr in path:
        items = [x for item in items for x in getattr(item, attr)]
    return [(name(x.error_code), getattr(x, "error_message", None)) for x in items]


def more_admin(conn: Connection) -> Obs:
    """The other admin APIs: topic ALTER / DELETE / ALTER_CONFIGS, and the
    cluster's (codes, and messages except where Kafka's names the request)."""
    obs: dict[str, Obs] = {}
    p = mod(v.CREATE_PARTITIONS, 3)
    r = conn.call(req(v.CREATE_PARTITIONS, 3, timeout=S10, validate_only=True, topics=(
        p.CreatePartitionsTopic(name="orders", count=2, assignments=None),)))
    obs["create_partitions"] = codes(r, "results")
    i = mod(v.INCREMENTAL_ALTER_CONFIGS, 1)
    r = conn.call(req(v.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=True, resources=tuple(
        i.AlterConfigsResource(resource_type=rt, resource_name=n, configs=(i.AlterableConfig(
            name=k, config_operation=0, value=val),))
        for rt, n, k, val in ((2, "orders", "retention.ms", "5000"),
                              (4, "", "log.cleaner.threads", "2")))))
    obs["incremental_alter_configs"] = sorted(codes(r, "responses"))
    d = mod(v.DELETE_RECORDS, 2)
    r = conn.call(req(v.DELETE_RECORDS, 2, timeout=S10, topics=(d.DeleteRecordsTopic(
        name="secret", partitions=(d.DeleteRecordsPartition(partition_index=0, offset=0),)),)))
    obs["delete_records"] = [(name(x.error_code), x.low_watermark)
                             for t in r.topics for x in t.partitions]
    e = mod(v.ELECT_LEADERS, 2)
    r = conn.call(req(v.ELECT_LEADERS, 2, election_type=0, timeout=S10, topic_partitions=(
        e.TopicPartitions(topic="orders", partitions=(0,)),)))
    obs["elect_leaders"] = (name(r.error_code), [c for c, _m in codes(
        r, "replica_election_results", "partition_result")])
    r = conn.call(req(v.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=True,
                      endpoint_type=1))
    obs["describe_cluster"] = (name(r.error_code), r.cluster_authorized_operations)
    r = conn.call(req(v.METADATA, 10, topics=(), allow_auto_topic_creation=False,
                      include_cluster_authorized_operations=True,
                      include_topic_authorized_operations=False))
    obs["metadata_cluster_operations"] = r.cluster_authorized_operations
    r = conn.call(req(v.LIST_PARTITION_REASSIGNMENTS, 0, timeout=S10, topics=None))
    obs["list_reassignments"] = name(r.error_code)
    r = conn.call(req(v.DESCRIBE_LOG_DIRS, 4, topics=None))
    obs["describe_log_dirs"] = (name(r.error_code), len(r.results))
    r = conn.call(req(v.DESCRIBE_CLIENT_QUOTAS, 1, components=(), strict=False))
    obs["describe_client_quotas"] = (name(r.error_code), r.error_message, r.entries is None)
    return obs


def cluster_admin(conn: Connection) -> Obs:
    """The cluster's own APIs (ALTER / DESCRIBE / ALTER_CONFIGS / DESCRIBE_CONFIGS
    on the cluster): codes, and messages where Kafka's does not name the request."""
    obs: dict[str, Obs] = {}
    a = mod(v.ALTER_PARTITION_REASSIGNMENTS, 0)
    r = conn.call(req(v.ALTER_PARTITION_REASSIGNMENTS, 0, timeout=S10, topics=(
        a.ReassignableTopic(name="orders", partitions=(a.ReassignablePartition(
            partition_index=0, replicas=(1,)),)),)))
    obs["alter_reassignments"] = (name(r.error_code), [c for c, _m in codes(
        r, "responses", "partitions")])
    q = mod(v.DESCRIBE_QUORUM, 2)
    r = conn.call(req(v.DESCRIBE_QUORUM, 2, topics=(q.TopicData(
        topic_name="__cluster_metadata", partitions=(q.PartitionData(partition_index=0),)),)))
    obs["describe_quorum"] = name(r.error_code)
    r = conn.call(req(v.UNREGISTER_BROKER, 0, broker_id=9))
    obs["unregister_broker"] = name(r.error_code)
    c = mod(v.ALTER_CLIENT_QUOTAS, 1)
    r = conn.call(req(v.ALTER_CLIENT_QUOTAS, 1, validate_only=True, entries=(c.EntryData(
        entity=(c.EntityData(entity_type="user", entity_name="alice"),),
        ops=(c.OpData(key="producer_byte_rate", value=1024.0, remove=False),)),)))
    obs["alter_client_quotas"] = [c for c, _m in codes(r, "entries")]
    r = conn.call(req(v.LIST_CONFIG_RESOURCES, 1, resource_types=()))
    obs["list_config_resources"] = name(r.error_code)
    ac = mod(v.ALTER_CONFIGS, 2)
    r = conn.call(req(v.ALTER_CONFIGS, 2, validate_only=True, resources=tuple(
        ac.AlterConfigsResource(resource_type=rt, resource_name=n, configs=(
            ac.AlterableConfig(name=k, value=val),))
        for rt, n, k, val in ((2, "orders", "retention.ms", "5000"),
                              (4, "1", "log.cleaner.threads", "2")))))
    obs["alter_configs"] = sorted(codes(r, "responses"))
    return obs


def share_groups(conn: Connection) -> Obs:
    """A share group's heartbeat (READ on it, DESCRIBE on the topics subscribed)
    and description (DESCRIBE on it), once its coordinator is set up."""
    obs: dict[str, Obs] = {}
    r = until(lambda: conn.call(req(v.SHARE_GROUP_HEARTBEAT, 1, group_id="sg",
                                    member_id=str(uuid.UUID(int=7)), member_epoch=0,
                                    rack_id=None, subscribed_topic_names=("orders", "secret"))),
              lambda r: name(r.error_code) not in TRANSIENT, "share heartbeat")
    obs["share_heartbeat"] = (name(r.error_code), r.error_message)
    r = conn.call(req(v.SHARE_GROUP_DESCRIBE, 1, group_ids=("sg", "g"),
                      include_authorized_operations=True))
    obs["share_describe"] = [(g.group_id, name(g.error_code), g.authorized_operations)
                             for g in r.groups]
    return obs


def more_groups(conn: Connection) -> Obs:
    obs: dict[str, Obs] = {}
    o = mod(v.OFFSET_DELETE, 0)
    r = conn.call(req(v.OFFSET_DELETE, 0, group_id="g", topics=(o.OffsetDeleteRequestTopic(
        name="orders", partitions=(o.OffsetDeleteRequestPartition(partition_index=0),)),)))
    obs["offset_delete"] = name(r.error_code)
    r = conn.call(req(v.DELETE_GROUPS, 2, groups_names=("g",)))
    obs["delete_groups"] = codes(r, "results")
    r = conn.call(req(v.DESCRIBE_GROUPS, 6, groups=("g", "nope"),
                      include_authorized_operations=True))
    obs["describe_other"] = [(g.group_id, name(g.error_code), g.error_message,
                              g.authorized_operations) for g in r.groups]
    r = conn.call(req(v.CONSUMER_GROUP_HEARTBEAT, 0, group_id="g", member_id="m-1",
                      member_epoch=0, rebalance_timeout=S10, server_assignor=None,
                      subscribed_topic_names=("orders", "secret"), topic_partitions=()))
    obs["consumer_heartbeat"] = (name(r.error_code), r.error_message)
    r = conn.call(req(v.DESCRIBE_TOPIC_PARTITIONS, 0, response_partition_limit=100, cursor=None,
                      topics=tuple(mod(v.DESCRIBE_TOPIC_PARTITIONS, 0).TopicRequest(name=t)
                                   for t in ("orders", "secret"))))
    obs["describe_topic_partitions"] = sorted((t.name, name(t.error_code),
                                               t.topic_authorized_operations) for t in r.topics)
    f = mod(v.OFFSET_FOR_LEADER_EPOCH, 4)
    r = conn.call(req(v.OFFSET_FOR_LEADER_EPOCH, 4, replica_id=-1, topics=tuple(
        f.OffsetForLeaderTopic(topic=t, partitions=(f.OffsetForLeaderPartition(
            partition=0, current_leader_epoch=-1, leader_epoch=0),))
        for t in ("orders", "secret"))))
    obs["offset_for_leader_epoch"] = sorted((t.topic, name(p.error_code))
                                            for t in r.topics for p in t.partitions)
    pr = mod(v.DESCRIBE_PRODUCERS, 0)
    r = conn.call(req(v.DESCRIBE_PRODUCERS, 0, topics=(pr.TopicRequest(
        name="secret", partition_indexes=(0,)),)))
    obs["describe_producers"] = codes(r, "topics", "partitions")
    # (DescribeTransactions left out: Kafka answers a start time of -1, which kio
    # cannot read)
    r = conn.call(req(v.LIST_TRANSACTIONS, 1, state_filters=(), producer_id_filters=(),
                      duration_filter=-1))
    obs["list_transactions"] = sorted(x.transactional_id for x in r.transaction_states)
    return obs


def sasl(sasl_bootstrap: str, user: str) -> Connection:
    host, port = sasl_bootstrap.rsplit(":", 1)
    return Connection(host, int(port), 15, ClientSecurity("SASL_PLAINTEXT", "PLAIN", user,
                                                          f"{user}-secret"))


def consumer_group_describe(sasl_bootstrap: str) -> Obs:
    """alice joins the KIP-848 group cg subscribed to orders; carol may DESCRIBE
    the group but not orders: what ConsumerGroupDescribe tells each."""
    alice = sasl(sasl_bootstrap, "alice")
    find_coordinator(alice, 0, "cg")
    epoch = 0

    def beat() -> Any:
        return alice.call(req(v.CONSUMER_GROUP_HEARTBEAT, 1, group_id="cg", member_id="m-1",
                              member_epoch=epoch, rebalance_timeout=S10, server_assignor=None,
                              subscribed_topic_names=("orders",), subscribed_topic_regex=None,
                              topic_partitions=()))
    r = until(beat, lambda r: name(r.error_code) not in TRANSIENT, "joined")
    epoch = r.member_epoch
    until(beat, lambda r: r.assignment is not None and bool(r.assignment.topic_partitions),
          "assigned")
    obs = {}
    for user in ("alice", "carol"):
        conn = sasl(sasl_bootstrap, user)
        r = conn.call(req(v.CONSUMER_GROUP_DESCRIBE, 1, group_ids=("cg", "g"),
                          include_authorized_operations=True))
        obs[f"{user}_consumer_group_describe"] = [
            (g.group_id, name(g.error_code), g.error_message, g.authorized_operations,
             len(g.members)) for g in r.groups]
        conn.close()
    alice.close()
    return obs


def regex_subscription(bootstrap: str, sasl_bootstrap: str) -> Obs:
    """alice subscribes the KIP-848 group rg to the regex ``orders|secret``: she
    may describe orders, not secret, so only orders is assigned to her (Kafka's
    filterTopicDescribeAuthorizedTopics); once she may describe secret too, the
    next refresh of the regex assigns it as well."""
    host, port = bootstrap.rsplit(":", 1)
    admin = Connection(host, int(port), 15)
    m = mod(v.METADATA, 12)
    r = admin.call(req(v.METADATA, 12, topics=tuple(m.MetadataRequestTopic(name=t, topic_id=None)
                                                    for t in ("orders", "secret")),
                       allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    names = {t.topic_id: t.name for t in r.topics}
    alice = sasl(sasl_bootstrap, "alice")
    find_coordinator(alice, 0, "rg")
    epoch, owned = 0, ()

    def beat() -> Any:
        h = mod(v.CONSUMER_GROUP_HEARTBEAT, 1)
        return alice.call(req(v.CONSUMER_GROUP_HEARTBEAT, 1, group_id="rg", member_id="m-r",
                              member_epoch=epoch, rebalance_timeout=S10, server_assignor=None,
                              subscribed_topic_names=None, subscribed_topic_regex="orders|secret",
                              topic_partitions=tuple(h.TopicPartitions(topic_id=t, partitions=p)
                                                     for t, p in owned)))

    def assigned(r: Any) -> list[tuple[str, list[int]]]:
        return sorted((names.get(t.topic_id, "?"), sorted(t.partitions))
                      for t in r.assignment.topic_partitions)

    def settled(r: Any, want: int) -> bool:
        nonlocal epoch, owned
        if name(r.error_code) in TRANSIENT:
            return False
        epoch = r.member_epoch
        if r.assignment is not None:
            owned = tuple((t.topic_id, tuple(t.partitions)) for t in r.assignment.topic_partitions)
        return r.assignment is not None and len(r.assignment.topic_partitions) == want
    obs: dict[str, Obs] = {}
    r = until(beat, lambda r: settled(r, 1) or bool(owned), "the regex resolved")
    obs["alice_regex_assignment"] = (name(r.error_code), assigned(r))
    a = mod(v.CREATE_ACLS, 3)
    r = admin.call(req(v.CREATE_ACLS, 3, creations=(a.AclCreation(
        resource_type=T, resource_name="secret", resource_pattern_type=LITERAL,
        principal="User:alice", host="*", operation=DESCRIBE, permission_type=ALLOW),)))
    assert {name(x.error_code) for x in r.results} == {"NONE"}
    r = until(beat, lambda r: settled(r, 2), "the regex refreshed after the ACL change")
    obs["alice_regex_assignment_after_acl"] = (name(r.error_code), assigned(r))
    alice.close()
    admin.close()
    return obs


def run_script(bootstrap: str, sasl_bootstrap: str) -> dict[str, Obs]:
    host, port = bootstrap.rsplit(":", 1)
    admin = Connection(host, int(port), 15)
    set_up(admin)
    admin.close()
    shost, sport = sasl_bootstrap.rsplit(":", 1)
    obs: dict[str, Obs] = {}
    for user in ("alice", "bob"):
        conn = Connection(shost, int(sport), 15, ClientSecurity(
            "SASL_PLAINTEXT", "PLAIN", user, f"{user}-secret"))
        obs[f"{user}_produce"] = produce(conn, ("orders", "secret"))
        obs[f"{user}_fetch"] = fetch(conn, ("orders", "secret"))
        obs[f"{user}_list_offsets"] = list_offsets(conn)
        obs[f"{user}_metadata_named"] = metadata(conn, ("orders", "secret", "nope"))
        obs[f"{user}_metadata_all"] = metadata(conn, None)
        obs[f"{user}_metadata_auto_create"] = auto_create(
            conn, "a-auto" if user == "alice" else "m-auto")
        for step, seen in group(conn).items():
            obs[f"{user}_group_{step}"] = seen
        for step, seen in transactions(conn).items():
            obs[f"{user}_txn_{step}"] = seen
        for step, seen in topic_admin(conn, (f"a-{user}", f"b-{user}")).items():
            obs[f"{user}_topics_{step}"] = seen
        for step, seen in more_admin(conn).items():
            obs[f"{user}_admin_{step}"] = seen
        for step, seen in more_groups(conn).items():
            obs[f"{user}_more_{step}"] = seen
        for step, seen in cluster_admin(conn).items():
            obs[f"{user}_cluster_{step}"] = seen
        for step, seen in share_groups(conn).items():
            obs[f"{user}_{step}"] = seen
        conn.close()
    obs.update(consumer_group_describe(sasl_bootstrap))
    obs.update(regex_subscription(bootstrap, sasl_bootstrap))
    return obs


STEPS = [f"{user}_{step}" for user in ("alice", "bob") for step in (
    "produce", "fetch", "list_offsets", "metadata_named", "metadata_all",
    "metadata_auto_create",
    *[f"group_{s}" for s in ("find", "join", "commit", "fetch_offsets", "fetch_offsets_v1",
                             "fetch_offsets_v7", "describe", "list")],
    *[f"txn_{s}" for s in ("init_idempotent", "find", "init", "add_partitions", "produce",
                           "add_offsets", "txn_offset_commit", "end")],
    *[f"topics_{s}" for s in ("create", "delete", "describe_configs_2_orders",
                              "describe_configs_2_a-auto", "describe_configs_4_1",
                              "describe_configs_32_g", "describe_configs_mixed")],
    *[f"admin_{s}" for s in ("create_partitions", "incremental_alter_configs",
                             "delete_records", "elect_leaders", "describe_cluster",
                             "metadata_cluster_operations", "list_reassignments",
                             "describe_log_dirs", "describe_client_quotas")],
    *[f"more_{s}" for s in ("offset_delete", "delete_groups", "describe_other",
                            "consumer_heartbeat", "describe_topic_partitions",
                            "offset_for_leader_epoch", "describe_producers",
                            "list_transactions")],
    *[f"cluster_{s}" for s in ("alter_reassignments", "describe_quorum", "unregister_broker",
                               "alter_client_quotas", "list_config_resources",
                               "alter_configs")],
    "share_heartbeat", "share_describe")] + [
    "alice_consumer_group_describe", "carol_consumer_group_describe",
    "alice_regex_assignment", "alice_regex_assignment_after_acl"]


def _ports() -> dict[str, int]:
    return {n: free_port(HOST) for n in ("PLAINTEXT", "SASL_PLAINTEXT")}


@pytest.fixture(scope="module")
def kafka_answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Obs]:
    ports, controller = _ports(), free_port(HOST)
    props = settings(ports)
    props["listeners"] += f",CONTROLLER://{HOST}:{controller}"
    props["listener.security.protocol.map"] += ",CONTROLLER:PLAINTEXT"
    ref = KafkaReference(Path(tmp_path_factory.mktemp("authz-reference")),
                         port=ports["PLAINTEXT"], controller_port=controller, overrides=props)
    ref.start()
    try:
        return run_script(ref.bootstrap, f"{HOST}:{ports['SASL_PLAINTEXT']}")
    finally:
        ref.close()


@pytest.fixture(scope="module")
def kcompat_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    work = tmp_path_factory.mktemp("authz-kcompat")
    ports = _ports()
    config = work / "broker.yaml"
    config.write_text(yaml.safe_dump({**settings(ports), "admin.port": "-1"}))
    broker = Broker(work / "broker", port=ports["PLAINTEXT"],
                    extra_args=("--config", str(config))).start()
    try:
        yield broker.bootstrap, f"{HOST}:{ports['SASL_PLAINTEXT']}"
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def kcompat_answers(kcompat_target: tuple[str, str]) -> dict[str, Obs]:
    return run_script(*kcompat_target)


@pytest.mark.parametrize("step", STEPS)
def test_step_matches_kafka(kafka_answers: dict[str, Obs], kcompat_answers: dict[str, Obs],
                            step: str) -> None:
    assert kcompat_answers.get(step) == kafka_answers.get(step), step


def test_every_step_ran(kafka_answers: dict[str, Obs]) -> None:
    assert sorted(kafka_answers) == sorted(STEPS)
