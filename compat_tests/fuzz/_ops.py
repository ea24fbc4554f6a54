"""What the differential fuzzer does to a broker, and what it observes.

Each operation sends one request (``_wire.Peer.call``) and reduces the
answer to what a client acts on: error codes, offsets, records and their
order, committed offsets, explicitly set configs. Error messages, throttle
times, topic ids, leaders and epochs are left out: they may differ and be
right (``_allowed``). ``settle_*`` wait until a change a broker makes after
answering (a topic created or deleted, partitions added) is visible, as a
client retries until it is: the fuzzer compares outcomes, not timing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kafka.protocol.admin.configs import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.admin.groups import DeleteGroupsRequest, DeleteGroupsResponse
from kafka.protocol.admin.topics import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.group import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from compat_tests.fuzz._wire import CLOSED, Peer, fetched_records, record_batch

Observation = Any
TOPIC_RESOURCE = 2
DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs config_source of a topic's own setting
SETTLE_S = 15.0
# retriable answers of a partition that a client retries while a topic is new
# or a leader moves: UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE,
# NOT_LEADER_OR_FOLLOWER
RETRIABLE = {3, 5, 6}
ROUTE_ATTEMPTS = 50  # a client's retries of a request routed to a moved leader or coordinator
# a group request's answers while its coordinator loads or moves
COORDINATOR_ERRORS = {("error", 14), ("error", 15), ("error", 16)}


def _first(answer: dict[str, Any] | str, *path: str | int) -> Any:
    node: Any = answer
    for step in path:
        node = node[step]
    return node


# -- routing: what a client does in a cluster --------------------------------------------

def _leader(peer: Peer, topic: str, partition: int) -> str | None:
    """The address of ``topic``-``partition``'s leader by Metadata; None: the
    first address (a single node, or no leader known: its error is observed)."""
    if len(peer.addresses) == 1:
        return None
    answer = peer.call(MetadataRequest, MetadataResponse, 12, {
        "topics": [{"topic_id": None, "name": topic}], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False})
    if answer == CLOSED:
        return None
    assert isinstance(answer, dict)
    brokers = {b["node_id"]: f"{b['host']}:{b['port']}" for b in answer["brokers"]}
    for found in answer["topics"]:
        for part in found["partitions"]:
            if part["partition_index"] == partition:
                return brokers.get(part["leader_id"])
    return None


def coordinator(peer: Peer, group: str, key_type: int = 0) -> str | None:
    """The address of ``group``'s coordinator (``key_type`` 1: a transactional
    id's); None as for ``_leader``."""
    if len(peer.addresses) == 1:
        return None
    answer = peer.call(FindCoordinatorRequest, FindCoordinatorResponse, 4, {
        "key_type": key_type, "coordinator_keys": [group]})
    if answer == CLOSED:
        return None
    assert isinstance(answer, dict)
    found = answer["coordinators"][0]
    return None if found["error_code"] else f"{found['host']}:{found['port']}"


def _routed(peer: Peer, route: Callable[[], str | None],
            send: Callable[[str | None], dict[str, Any] | str],
            error_of: Callable[[dict[str, Any]], int], retriable: set[int]) -> Any:
    """``send`` to where ``route`` says; in a cluster, again (routed afresh)
    while the answer is one a client retries (a leader or coordinator moved)."""
    for _ in range(ROUTE_ATTEMPTS):
        answer = send(route())
        if len(peer.addresses) == 1 or answer == CLOSED or error_of(answer) not in retriable:
            return answer
        time.sleep(0.1)
    return answer


def to_leader(peer: Peer, topic: str, partition: int, request: Any, response: Any,
               version: int, data: dict[str, Any],
               error_of: Callable[[dict[str, Any]], int]) -> Any:
    return _routed(peer, lambda: _leader(peer, topic, partition),
                   lambda to: peer.call(request, response, version, data, to),
                   error_of, {5, 6})


def to_coordinator(peer: Peer, group: str, request: Any, response: Any, version: int,
                   data: dict[str, Any], error_of: Callable[[dict[str, Any]], int],
                   key_type: int = 0) -> Any:
    return _routed(peer, lambda: coordinator(peer, group, key_type),
                   lambda to: peer.call(request, response, version, data, to),
                   error_of, {14, 15, 16})


def create_topic(peer: Peer, name: str, partitions: int, replication: int,
                 configs: dict[str, str], validate_only: bool) -> Observation:
    answer = peer.call(CreateTopicsRequest, CreateTopicsResponse, 7, {
        "topics": [{"name": name, "num_partitions": partitions,
                    "replication_factor": replication, "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
        "timeout_ms": 10_000, "validate_only": validate_only})
    if answer == CLOSED:
        return CLOSED
    topic = _first(answer, "topics", 0)
    if topic["error_code"]:
        return ("error", topic["error_code"])
    return ("ok", topic["num_partitions"], topic["replication_factor"])


def delete_topic(peer: Peer, name: str) -> Observation:
    answer = peer.call(DeleteTopicsRequest, DeleteTopicsResponse, 6, {
        "topics": [{"name": name, "topic_id": None}], "timeout_ms": 10_000})
    return answer if answer == CLOSED else _first(answer, "responses", 0, "error_code")


def create_partitions(peer: Peer, name: str, count: int, validate_only: bool) -> Observation:
    answer = peer.call(CreatePartitionsRequest, CreatePartitionsResponse, 3, {
        "topics": [{"name": name, "count": count, "assignments": None}],
        "timeout_ms": 10_000, "validate_only": validate_only})
    return answer if answer == CLOSED else _first(answer, "results", 0, "error_code")


def metadata(peer: Peer, name: str) -> Observation:
    """The topic's error code and its partitions' error codes, in order."""
    answer = peer.call(MetadataRequest, MetadataResponse, 12, {
        "topics": [{"topic_id": None, "name": name}], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False})
    if answer == CLOSED:
        return CLOSED
    topic = _first(answer, "topics", 0)
    parts = sorted((p["partition_index"], p["error_code"]) for p in topic["partitions"])
    return (topic["error_code"], tuple(parts))


def produce(peer: Peer, name: str, partition: int, records: list[tuple[bytes | None, bytes | None]],
            timestamp: int, compression: int, acks: int) -> Observation:
    batch = record_batch(records, timestamp, compression)
    answer = to_leader(peer, name, partition, ProduceRequest, ProduceResponse, 9, {
        "transactional_id": None, "acks": acks, "timeout_ms": 10_000, "topic_data": [
            {"name": name, "partition_data": [{"index": partition, "records": batch}]}]},
        lambda a: a["responses"][0]["partition_responses"][0]["error_code"])
    if answer == CLOSED or acks == 0:
        return answer if answer == CLOSED else "no answer asked"
    part = _first(answer, "responses", 0, "partition_responses", 0)
    if part["error_code"]:
        return ("error", part["error_code"])
    return ("ok", part["base_offset"], part["log_start_offset"])


def fetch_partition(peer: Peer, name: str, partition: int, offset: int,
                    isolation: int = 0) -> Any:
    """The partition's answer to a one-partition Fetch v12 at ``offset`` (a
    dict), or what a failed one observes (``CLOSED``, an error tuple)."""
    answer = to_leader(peer, name, partition, FetchRequest, FetchResponse, 12, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": isolation, "session_id": 0, "session_epoch": -1, "topics": [
            {"topic": name, "partitions": [
                {"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                 "last_fetched_epoch": -1, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": ""},
        lambda a: a["error_code"] or a["responses"][0]["partitions"][0]["error_code"])
    if answer == CLOSED:
        return CLOSED
    if answer["error_code"]:
        return ("error", answer["error_code"])
    part = _first(answer, "responses", 0, "partitions", 0)
    if part["error_code"]:
        return ("error", part["error_code"], part["high_watermark"], part["log_start_offset"])
    return part


def fetch(peer: Peer, name: str, partition: int, offset: int) -> Observation:
    part = fetch_partition(peer, name, partition, offset)
    if not isinstance(part, dict):
        return part
    return ("ok", part["high_watermark"], part["log_start_offset"],
            tuple(fetched_records(part["records"], offset)))


def list_offsets(peer: Peer, name: str, partition: int, timestamp: int) -> Observation:
    answer = to_leader(peer, name, partition, ListOffsetsRequest, ListOffsetsResponse, 7, {
        "replica_id": -1, "isolation_level": 0, "topics": [
            {"name": name, "partitions": [
                {"partition_index": partition, "current_leader_epoch": -1,
                 "timestamp": timestamp}]}]},
        lambda a: a["topics"][0]["partitions"][0]["error_code"])
    if answer == CLOSED:
        return CLOSED
    part = _first(answer, "topics", 0, "partitions", 0)
    if part["error_code"]:
        return ("error", part["error_code"])
    return ("ok", part["offset"], part["timestamp"])


def delete_records(peer: Peer, name: str, partition: int, offset: int) -> Observation:
    answer = to_leader(peer, name, partition, DeleteRecordsRequest, DeleteRecordsResponse, 2, {
        "topics": [{"name": name, "partitions": [{"partition_index": partition,
                                                  "offset": offset}]}],
        "timeout_ms": 10_000},
        lambda a: a["topics"][0]["partitions"][0]["error_code"])
    if answer == CLOSED:
        return CLOSED
    part = _first(answer, "topics", 0, "partitions", 0)
    if part["error_code"]:
        return ("error", part["error_code"])
    return ("ok", part["low_watermark"])


def alter_config(peer: Peer, name: str, key: str, op: int, value: str | None,
                 validate_only: bool) -> Observation:
    answer = peer.call(IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, 1, {
        "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": name, "configs": [
            {"name": key, "config_operation": op, "value": value}]}],
        "validate_only": validate_only})
    return answer if answer == CLOSED else _first(answer, "responses", 0, "error_code")


def topic_overrides(peer: Peer, name: str) -> Observation:
    """The topic's own settings (what was set on it, not defaults)."""
    answer = peer.call(DescribeConfigsRequest, DescribeConfigsResponse, 4, {
        "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": name,
                       "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False})
    if answer == CLOSED:
        return CLOSED
    result = _first(answer, "results", 0)
    if result["error_code"]:
        return ("error", result["error_code"])
    return ("ok", tuple(sorted((c["name"], c["value"]) for c in result["configs"]
                               if c["config_source"] == DYNAMIC_TOPIC_CONFIG)))


def commit_offset(peer: Peer, group: str, name: str, partition: int, offset: int,
                  meta: str) -> Observation:
    """A commit outside any generation (as a standalone consumer commits)."""
    answer = to_coordinator(peer, group, OffsetCommitRequest, OffsetCommitResponse, 8, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [
            {"name": name, "partitions": [
                {"partition_index": partition, "committed_offset": offset,
                 "committed_leader_epoch": -1, "committed_metadata": meta}]}]},
        lambda a: a["topics"][0]["partitions"][0]["error_code"])
    return answer if answer == CLOSED else _first(
        answer, "topics", 0, "partitions", 0, "error_code")


def offset_delete(peer: Peer, group: str, name: str, partition: int) -> Observation:
    """OffsetDelete (v0) of one partition's committed offset: the group's
    error, or the partition's (GROUP_SUBSCRIBED_TO_TOPIC while a member of the
    group subscribes to the topic)."""
    answer = to_coordinator(peer, group, OffsetDeleteRequest, OffsetDeleteResponse, 0, {
        "group_id": group, "topics": [
            {"name": name, "partitions": [{"partition_index": partition}]}]},
        lambda a: a["error_code"])
    if answer == CLOSED:
        return CLOSED
    if answer["error_code"]:
        return ("error", answer["error_code"])
    return ("ok", _first(answer, "topics", 0, "partitions", 0, "error_code"))


def fetch_offset(peer: Peer, group: str, name: str, partition: int,
                 stable: bool = False) -> Observation:
    """OffsetFetch (v8); ``stable``: require_stable (a partition with offsets
    of an open transaction is UNSTABLE_OFFSET_COMMIT, not the offset before)."""
    answer = to_coordinator(peer, group, OffsetFetchRequest, OffsetFetchResponse, 8, {
        "groups": [{"group_id": group, "topics": [
            {"name": name, "partition_indexes": [partition]}]}],
        "require_stable": stable}, lambda a: a["groups"][0]["error_code"])
    if answer == CLOSED:
        return CLOSED
    group_answer = _first(answer, "groups", 0)
    if group_answer["error_code"]:
        return ("error", group_answer["error_code"])
    part = _first(group_answer, "topics", 0, "partitions", 0)
    return (part["error_code"], part["committed_offset"], part["metadata"])


def find_coordinator(peer: Peer, group: str, key_type: int = 0) -> Observation:
    answer = peer.call(FindCoordinatorRequest, FindCoordinatorResponse, 4, {
        "key_type": key_type, "coordinator_keys": [group]})
    return answer if answer == CLOSED else _first(answer, "coordinators", 0, "error_code")


def delete_group(peer: Peer, group: str) -> Observation:
    answer = to_coordinator(peer, group, DeleteGroupsRequest, DeleteGroupsResponse, 2,
                             {"groups_names": [group]}, lambda a: a["results"][0]["error_code"])
    return answer if answer == CLOSED else _first(answer, "results", 0, "error_code")


# -- settling: what a client waits for after a change ----------------------------------------

def settle_topic(peer: Peer, name: str, partitions: int | None) -> None:
    """Until Metadata shows ``name`` with every partition led (``partitions``
    of them, when given), or gone (``partitions`` None), and a partition
    answers a ListOffsets without a retriable error; raises on timeout."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        seen = metadata(peer, name)
        if partitions is None:
            if seen != CLOSED and seen[0] == 3:
                return
        elif (seen != CLOSED and seen[0] == 0 and len(seen[1]) == partitions
              and all(code == 0 for _, code in seen[1])
              and all(_answered(list_offsets(peer, name, p, -1)) for p in range(partitions))):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{peer.name}: {name} not settled ({partitions} partitions): {seen}")
        time.sleep(0.05)


def settle_high_watermark(peer: Peer, topic: str, partition: int, end: int) -> None:
    """Until the partition's high watermark reaches ``end`` (an acks=1
    produce is answered before its followers have it), as a consumer waits."""
    deadline = time.monotonic() + SETTLE_S
    while (seen := list_offsets(peer, topic, partition, -1)) != CLOSED \
            and seen[0] == "ok" and seen[1] < end:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{peer.name}: {topic}-{partition} high watermark {seen}")
        time.sleep(0.05)


def settle_offsets_gone(peer: Peer, groups: list[str], topic: str, partitions: int = 4) -> None:
    """Until no group of ``groups`` answers a committed offset of deleted
    ``topic``: Kafka deletes them after the topic, not with it."""
    deadline = time.monotonic() + SETTLE_S
    for group in groups:
        for partition in range(partitions):
            while (seen := fetch_offset(peer, group, topic, partition)) != CLOSED \
                    and seen[0] == 0 and seen[1] != -1:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{peer.name}: {group} keeps {topic}-{partition}: {seen}")
                time.sleep(0.05)


def settle_group(peer: Peer, group: str) -> None:
    """Until ``group``'s coordinator is found and answers for it (the offsets
    topic is created on a group's first use, and a coordinator loading its
    partition answers NOT_COORDINATOR meanwhile: a client finds it again and
    retries)."""
    deadline = time.monotonic() + SETTLE_S
    while (seen := find_coordinator(peer, group)) != 0 or \
            (seen := fetch_offset(peer, group, "-", 0)) in COORDINATOR_ERRORS:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{peer.name}: no coordinator for {group}: {seen}")
        time.sleep(0.1)


def _answered(observed: Observation) -> bool:
    return observed != CLOSED and not (observed[0] == "error" and observed[1] in RETRIABLE)
