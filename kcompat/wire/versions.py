"""The one table of API versions kcompat advertises in ApiVersions.

Theory of operation
-------------------
Maxima follow Apache Kafka 4.4's answers (kafka-python infers the broker version
from them — Produce v13 reads as 4.1, ListOffsets v11 as 4.2 — and Java 4.4
clients then take their newest paths), capped only where a newer version means
something kcompat does not do (docs/compatibility.md; the differential test
compat_tests/java/test_newest_versions_differential.py holds the list):

* Produce v13, Fetch v13-v18, OffsetCommit/OffsetFetch v10 name topics by id
  (KIP-516): every topic has a stable id from its ``create_topic`` metadata
  record, and an unknown id is UNKNOWN_TOPIC_ID as in Kafka.
* AddPartitionsToTxn max 3: v4+ is the broker-to-broker batched form (many
  transactions, verify-only) and v5 transactions V2; clients send v3 or less.
* EndTxn max 4, TxnOffsetCommit max 4: v5 means transactions V2 (KIP-890 part
  2: an epoch bump at every transaction end, implicit AddOffsetsToTxn), which
  kcompat does not do and never advertises (``transaction.version`` stays 1);
  TxnOffsetCommit v6 (topic ids) has no kio schema.
* Versions kio 0.6.5 does not ship (ApiVersions v5, DeleteGroups v3) are
  declared in kio's form in ``kcompat.wire.kio_extra``.
* Low minimums are advertised for librdkafka < 2.11, whose feature detection
  matches one exact version (e.g. FindCoordinator v0 enables LZ4); a request at a
  version below ``parse_min`` is answered with UNSUPPORTED_VERSION instead.

Only APIs that have a handler appear here; later issues add theirs. A
controller-only node serves the subset Kafka's controller listener has
(``CONTROLLER_APIS``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ApiRange:
    api_key: int
    name: str
    min_version: int
    max_version: int
    parse_min: int  # lowest version we actually parse (below: UNSUPPORTED_VERSION)


PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, API_VERSIONS = 15, 16, 18
DELETE_GROUPS, OFFSET_DELETE = 42, 47
ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66
CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS, INIT_PRODUCER_ID = 19, 20, 21, 22
OFFSET_FOR_LEADER_EPOCH, DESCRIBE_CONFIGS, ALTER_CONFIGS = 23, 32, 33
CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLUSTER = 37, 44, 60
DESCRIBE_TOPIC_PARTITIONS = 75
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69
DESCRIBE_LOG_DIRS, ELECT_LEADERS, DESCRIBE_QUORUM, LIST_CONFIG_RESOURCES = 35, 43, 55, 74
ALTER_REPLICA_LOG_DIRS = 34
DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS, DESCRIBE_USER_SCRAM_CREDENTIALS = 48, 49, 50
SHARE_GROUP_HEARTBEAT, SHARE_GROUP_DESCRIBE, SHARE_FETCH, SHARE_ACKNOWLEDGE = 76, 77, 78, 79
DESCRIBE_SHARE_GROUP_OFFSETS, ALTER_SHARE_GROUP_OFFSETS, DELETE_SHARE_GROUP_OFFSETS = 90, 91, 92
ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 45, 46
ADD_RAFT_VOTER, REMOVE_RAFT_VOTER, UNREGISTER_BROKER = 80, 81, 64
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
ALTER_USER_SCRAM_CREDENTIALS = 51

_TABLE = (
    ApiRange(PRODUCE, "Produce", 0, 13, 3),
    ApiRange(FETCH, "Fetch", 4, 18, 4),
    ApiRange(LIST_OFFSETS, "ListOffsets", 1, 11, 1),
    ApiRange(METADATA, "Metadata", 0, 13, 0),
    ApiRange(OFFSET_COMMIT, "OffsetCommit", 2, 10, 2),
    ApiRange(OFFSET_FETCH, "OffsetFetch", 1, 10, 1),
    ApiRange(FIND_COORDINATOR, "FindCoordinator", 0, 6, 0),
    ApiRange(JOIN_GROUP, "JoinGroup", 0, 9, 0),
    ApiRange(HEARTBEAT, "Heartbeat", 0, 4, 0),
    ApiRange(LEAVE_GROUP, "LeaveGroup", 0, 5, 0),
    ApiRange(SYNC_GROUP, "SyncGroup", 0, 5, 0),
    ApiRange(DESCRIBE_GROUPS, "DescribeGroups", 0, 6, 0),
    ApiRange(LIST_GROUPS, "ListGroups", 0, 5, 0),
    ApiRange(API_VERSIONS, "ApiVersions", 0, 5, 0),
    ApiRange(CREATE_TOPICS, "CreateTopics", 2, 7, 2),
    ApiRange(DELETE_TOPICS, "DeleteTopics", 1, 6, 1),
    ApiRange(DELETE_RECORDS, "DeleteRecords", 0, 2, 0),
    ApiRange(INIT_PRODUCER_ID, "InitProducerId", 0, 5, 0),
    ApiRange(OFFSET_FOR_LEADER_EPOCH, "OffsetForLeaderEpoch", 2, 4, 2),
    ApiRange(DESCRIBE_CONFIGS, "DescribeConfigs", 1, 4, 1),
    ApiRange(ALTER_CONFIGS, "AlterConfigs", 0, 2, 0),
    ApiRange(CREATE_PARTITIONS, "CreatePartitions", 0, 3, 0),
    ApiRange(INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigs", 0, 1, 0),
    ApiRange(DESCRIBE_CLUSTER, "DescribeCluster", 0, 2, 0),
    ApiRange(DESCRIBE_TOPIC_PARTITIONS, "DescribeTopicPartitions", 0, 0, 0),
    ApiRange(ALTER_REPLICA_LOG_DIRS, "AlterReplicaLogDirs", 1, 2, 1),
    ApiRange(DESCRIBE_LOG_DIRS, "DescribeLogDirs", 1, 5, 1),
    ApiRange(ELECT_LEADERS, "ElectLeaders", 0, 2, 0),
    ApiRange(ALTER_PARTITION_REASSIGNMENTS, "AlterPartitionReassignments", 0, 1, 0),
    ApiRange(LIST_PARTITION_REASSIGNMENTS, "ListPartitionReassignments", 0, 0, 0),
    ApiRange(DESCRIBE_QUORUM, "DescribeQuorum", 0, 2, 0),
    ApiRange(ADD_RAFT_VOTER, "AddRaftVoter", 0, 1, 0),
    ApiRange(REMOVE_RAFT_VOTER, "RemoveRaftVoter", 0, 0, 0),
    ApiRange(UNREGISTER_BROKER, "UnregisterBroker", 0, 0, 0),
    ApiRange(LIST_CONFIG_RESOURCES, "ListConfigResources", 0, 1, 0),
    ApiRange(DESCRIBE_CLIENT_QUOTAS, "DescribeClientQuotas", 0, 1, 0),
    ApiRange(ALTER_CLIENT_QUOTAS, "AlterClientQuotas", 0, 1, 0),
    ApiRange(DESCRIBE_USER_SCRAM_CREDENTIALS, "DescribeUserScramCredentials", 0, 0, 0),
    ApiRange(ALTER_USER_SCRAM_CREDENTIALS, "AlterUserScramCredentials", 0, 0, 0),
    ApiRange(DESCRIBE_ACLS, "DescribeAcls", 1, 3, 1),
    ApiRange(CREATE_ACLS, "CreateAcls", 1, 3, 1),
    ApiRange(DELETE_ACLS, "DeleteAcls", 1, 3, 1),
    ApiRange(SASL_HANDSHAKE, "SaslHandshake", 0, 1, 0),
    ApiRange(SASL_AUTHENTICATE, "SaslAuthenticate", 0, 2, 0),
    ApiRange(DELETE_GROUPS, "DeleteGroups", 0, 3, 0),
    ApiRange(OFFSET_DELETE, "OffsetDelete", 0, 0, 0),
    ApiRange(ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn", 0, 3, 0),
    ApiRange(ADD_OFFSETS_TO_TXN, "AddOffsetsToTxn", 0, 4, 0),
    ApiRange(END_TXN, "EndTxn", 0, 4, 0),
    ApiRange(TXN_OFFSET_COMMIT, "TxnOffsetCommit", 0, 4, 0),
    ApiRange(DESCRIBE_PRODUCERS, "DescribeProducers", 0, 0, 0),
    ApiRange(DESCRIBE_TRANSACTIONS, "DescribeTransactions", 0, 0, 0),
    ApiRange(LIST_TRANSACTIONS, "ListTransactions", 0, 2, 0),
    ApiRange(CONSUMER_GROUP_HEARTBEAT, "ConsumerGroupHeartbeat", 0, 1, 0),
    ApiRange(CONSUMER_GROUP_DESCRIBE, "ConsumerGroupDescribe", 0, 1, 0),
    ApiRange(SHARE_GROUP_HEARTBEAT, "ShareGroupHeartbeat", 1, 1, 1),
    ApiRange(SHARE_GROUP_DESCRIBE, "ShareGroupDescribe", 1, 1, 1),
    ApiRange(SHARE_FETCH, "ShareFetch", 1, 2, 1),
    ApiRange(SHARE_ACKNOWLEDGE, "ShareAcknowledge", 1, 2, 1),
    ApiRange(DESCRIBE_SHARE_GROUP_OFFSETS, "DescribeShareGroupOffsets", 0, 1, 0),
    ApiRange(ALTER_SHARE_GROUP_OFFSETS, "AlterShareGroupOffsets", 0, 0, 0),
    ApiRange(DELETE_SHARE_GROUP_OFFSETS, "DeleteShareGroupOffsets", 0, 0, 0),
)

API_RANGES: dict[int, ApiRange] = {r.api_key: r for r in _TABLE}

#: What a controller-only node (``process.roles=controller``) serves: the APIs of
#: Kafka 4.4's controller listener (``ApiKeys.apisForListener(CONTROLLER)``) that
#: kcompat has, at the same versions. Kafka's Raft, registration and heartbeat
#: APIs are kcompat's own inter-broker frames (``KCOMPAT_RAFT``); a client Fetch
#: is answered INVALID_REQUEST there, as Kafka's controller answers it. Any other
#: API closes the connection (Kafka: "... which is not enabled").
CONTROLLER_APIS = frozenset({
    FETCH, SASL_HANDSHAKE, API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_ACLS,
    CREATE_ACLS, DELETE_ACLS, DESCRIBE_CONFIGS, ALTER_CONFIGS, SASL_AUTHENTICATE,
    CREATE_PARTITIONS, ELECT_LEADERS, INCREMENTAL_ALTER_CONFIGS, ALTER_PARTITION_REASSIGNMENTS,
    LIST_PARTITION_REASSIGNMENTS, ALTER_CLIENT_QUOTAS, DESCRIBE_USER_SCRAM_CREDENTIALS,
    ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_QUORUM, DESCRIBE_CLUSTER, UNREGISTER_BROKER,
    ADD_RAFT_VOTER, REMOVE_RAFT_VOTER,
})
CONTROLLER_RANGES: dict[int, ApiRange] = {k: r for k, r in API_RANGES.items()
                                          if k in CONTROLLER_APIS}


def served(controller_only: bool) -> dict[int, ApiRange]:
    """The APIs a node serves: all, or a controller-only node's."""
    return CONTROLLER_RANGES if controller_only else API_RANGES

# Internal, never advertised: inter-broker Raft frames in cluster mode
# (kcompat.broker.replication.codec / transport explain why a private key).
KCOMPAT_RAFT = 1000


def api_name(api_key: int) -> str:
    r = API_RANGES.get(api_key)
    return r.name if r else f"api-{api_key}"


def is_supported(api_key: int, version: int) -> bool:
    r = API_RANGES.get(api_key)
    return r is not None and r.parse_min <= version <= r.max_version
