"""The fuzzer's idempotent and transactional producers, and READ_COMMITTED reads.

A sequence has two producer slots on each broker: ``idempotent`` (an
InitProducerId without a transactional id) and ``transactional`` (with the
sequence's transactional id), and ``fenced``, the transactional slot's
previous producer once it is initialized again (a zombie). A slot's producer
id, epoch and next sequence per partition live in ``Peer.state``: each
broker chooses ids and epochs, so they are used, never compared. What is
compared is what a producer acts on — error codes, base offsets — and
whether a re-initialized transactional id kept its producer id.

A produce sends the slot's next sequence, or the last acknowledged batch
again (a duplicate: the same sequence range and records), or a sequence past
the next (a gap). Transactional requests go to the transactional id's
coordinator and are retried while it answers what a producer retries
(a coordinator loading or moving, CONCURRENT_TRANSACTIONS while the previous
transaction's markers are written). ``settle_transaction`` waits after an
EndTxn until the markers are in (the last stable offset reaches the high
watermark), as a READ_COMMITTED consumer waits for them.

Offsets in a transaction: AddOffsetsToTxn of a group, then TxnOffsetCommit
to the group's coordinator (outside a generation, or as the group's first
member), observed by OffsetFetch with and without require_stable (pending:
UNSTABLE_OFFSET_COMMIT, or the offset before the transaction); after the
EndTxn ``settle_transaction`` also waits until none is pending.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)

from compat_tests.fuzz import _members as members
from compat_tests.fuzz import _ops as ops
from compat_tests.fuzz._wire import CLOSED, Peer, fetched_records, record_batch

Observation = Any
TXN_KEY = 1  # FindCoordinator key type of a transactional id
# what a producer retries on a transactional request: COORDINATOR_LOAD_IN_PROGRESS,
# COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS
TXN_RETRIABLE = {14, 15, 16, 51}
TXN_ATTEMPTS = 100
READ_COMMITTED = 1
NEXT, DUPLICATE, GAP = "next", "duplicate", "gap"
UNSTABLE_OFFSET_COMMIT = 88


@dataclass
class Producer:
    producer_id: int
    epoch: int
    transactional_id: str | None
    next_sequence: dict[tuple[str, int], int] = field(default_factory=dict)
    # the last acknowledged batch per partition: its base sequence and records
    last_batch: dict[tuple[str, int], tuple[int, list[Any]]] = field(default_factory=dict)
    in_transaction: set[tuple[str, int]] = field(default_factory=set)
    # (group, topic, partition) of offsets committed in the transaction
    offsets: set[tuple[str, str, int]] = field(default_factory=set)


def _txn_call(peer: Peer, txn_id: str | None, request: Any, response: Any, version: int,
              data: dict[str, Any], error_of: Any) -> Any:
    """A transactional request, to the coordinator, retried as a producer does."""
    for _ in range(TXN_ATTEMPTS):
        if txn_id is None:
            answer = peer.call(request, response, version, data)
        else:
            answer = ops.to_coordinator(peer, txn_id, request, response, version, data,
                                        error_of, TXN_KEY)
        if answer == CLOSED or error_of(answer) not in TXN_RETRIABLE:
            return answer
        if txn_id is not None and error_of(answer) in (15, 16):
            # found afresh, as a producer does: the first look-up creates the
            # transaction state topic
            ops.find_coordinator(peer, txn_id, TXN_KEY)
        time.sleep(0.1)
    return answer


def init_producer(peer: Peer, slot: str, transactional_id: str | None) -> Observation:
    """InitProducerId for ``slot``: its error, and for a transactional id
    initialized before, whether the producer id was kept (epoch bumped)."""
    answer = _txn_call(peer, transactional_id, InitProducerIdRequest, InitProducerIdResponse,
                       4, {"transactional_id": transactional_id,
                           "transaction_timeout_ms": 60_000, "producer_id": -1,
                           "producer_epoch": -1},
                       lambda a: a["error_code"])
    if answer == CLOSED:
        return CLOSED
    if answer["error_code"]:
        return ("error", answer["error_code"])
    before = peer.state.get(slot)
    peer.state[slot] = Producer(answer["producer_id"], answer["producer_epoch"],
                                transactional_id)
    if before is None:
        return ("ok",)
    if transactional_id is not None:
        peer.state["fenced"] = before
    kept = before.producer_id == answer["producer_id"]
    return ("ok", "same producer id" if kept else "new producer id",
            "epoch advanced" if kept and answer["producer_epoch"] > before.epoch else "")


def produce_as(peer: Peer, slot: str, mode: str, topic: str, partition: int,
               records: list[tuple[bytes | None, bytes | None]], timestamp: int) -> Observation:
    """A batch of ``slot``'s producer at the ``mode`` sequence (acks=all)."""
    producer = peer.state.get(slot)
    if producer is None:
        return "no producer"
    key = (topic, partition)
    sequence = producer.next_sequence.get(key, 0)
    if mode == DUPLICATE:
        if key not in producer.last_batch:
            return "nothing to duplicate"
        sequence, records = producer.last_batch[key]
    elif mode == GAP:
        sequence += 2
    batch = record_batch(records, timestamp, 0, (producer.producer_id, producer.epoch, sequence),
                         producer.transactional_id is not None)
    answer = ops.to_leader(peer, topic, partition, ProduceRequest, ProduceResponse, 9, {
        "transactional_id": producer.transactional_id, "acks": -1, "timeout_ms": 10_000,
        "topic_data": [{"name": topic, "partition_data": [
            {"index": partition, "records": batch}]}]},
        lambda a: a["responses"][0]["partition_responses"][0]["error_code"])
    if answer == CLOSED:
        return CLOSED
    part = answer["responses"][0]["partition_responses"][0]
    if part["error_code"]:
        return ("error", part["error_code"])
    if mode != DUPLICATE:
        producer.next_sequence[key] = sequence + len(records)
        producer.last_batch[key] = (sequence, records)
    return ("ok", part["base_offset"], part["log_start_offset"])


def add_partition(peer: Peer, topic: str, partition: int) -> Observation:
    """AddPartitionsToTxn (v3, a producer's) of one partition: its error."""
    producer = peer.state.get("transactional")
    if producer is None:
        return "no producer"
    answer = _txn_call(peer, producer.transactional_id, AddPartitionsToTxnRequest,
                       AddPartitionsToTxnResponse, 3, {
                           "v3_and_below_transactional_id": producer.transactional_id,
                           "v3_and_below_producer_id": producer.producer_id,
                           "v3_and_below_producer_epoch": producer.epoch,
                           "v3_and_below_topics": [{"name": topic, "partitions": [partition]}]},
                       lambda a: a["results_by_topic_v3_and_below"][0]["results_by_partition"][0]
                       ["partition_error_code"])
    if answer == CLOSED:
        return CLOSED
    error = answer["results_by_topic_v3_and_below"][0]["results_by_partition"][0][
        "partition_error_code"]
    if not error:
        producer.in_transaction.add((topic, partition))
    return error


def add_offsets(peer: Peer, group: str) -> Observation:
    """AddOffsetsToTxn (v3) of ``group`` to the transactional slot's
    transaction: its error."""
    producer = peer.state.get("transactional")
    if producer is None:
        return "no producer"
    answer = _txn_call(peer, producer.transactional_id, AddOffsetsToTxnRequest,
                       AddOffsetsToTxnResponse, 3, {
                           "transactional_id": producer.transactional_id,
                           "producer_id": producer.producer_id,
                           "producer_epoch": producer.epoch, "group_id": group},
                       lambda a: a["error_code"])
    return answer if answer == CLOSED else answer["error_code"]


def txn_offset_commit(peer: Peer, group: str, topic: str, partition: int, offset: int,
                      as_member: bool) -> Observation:
    """TxnOffsetCommit (v3) of the transactional slot, to the group's
    coordinator, outside any generation or as the group's first member (its
    id and generation): the partition's error."""
    producer = peer.state.get("transactional")
    if producer is None:
        return "no producer"
    member = members.member_of(peer, group, 0) if as_member else None

    def error_of(answer: dict[str, Any]) -> int:
        return int(answer["topics"][0]["partitions"][0]["error_code"])

    for _ in range(TXN_ATTEMPTS):
        answer = ops.to_coordinator(peer, group, TxnOffsetCommitRequest,
                                    TxnOffsetCommitResponse, 3, {
            "transactional_id": producer.transactional_id, "group_id": group,
            "producer_id": producer.producer_id, "producer_epoch": producer.epoch,
            "generation_id": member.generation if member else -1,
            "member_id": member.member_id if member else "", "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": partition, "committed_offset": offset,
                 "committed_leader_epoch": -1, "committed_metadata": "t"}]}]},
            error_of)
        if answer == CLOSED or error_of(answer) not in TXN_RETRIABLE:
            break
        time.sleep(0.1)
    if answer == CLOSED:
        return CLOSED
    if not error_of(answer):
        producer.offsets.add((group, topic, partition))
    return error_of(answer)


def end_txn(peer: Peer, commit: bool) -> Observation:
    """EndTxn (v3) of the transactional slot: its error."""
    producer = peer.state.get("transactional")
    if producer is None:
        return "no producer"
    answer = _txn_call(peer, producer.transactional_id, EndTxnRequest, EndTxnResponse, 3, {
        "transactional_id": producer.transactional_id, "producer_id": producer.producer_id,
        "producer_epoch": producer.epoch, "committed": commit}, lambda a: a["error_code"])
    if answer == CLOSED:
        return CLOSED
    return answer["error_code"]


def fetch_committed(peer: Peer, topic: str, partition: int, offset: int) -> Observation:
    """A READ_COMMITTED Fetch: the watermarks, the last stable offset and the
    records a consumer hands out (no aborted ones, no markers)."""
    part = ops.fetch_partition(peer, topic, partition, offset, READ_COMMITTED)
    if not isinstance(part, dict):
        return part
    aborted = [(a["producer_id"], a["first_offset"])
               for a in part["aborted_transactions"] or []]
    return ("ok", part["high_watermark"], part["last_stable_offset"], part["log_start_offset"],
            tuple(fetched_records(part["records"], offset, aborted)))


def settle_transaction(peer: Peer, slot: str = "transactional") -> None:
    """After an EndTxn (or a re-initialization, ``slot`` "fenced"): until each
    partition of the slot's transaction shows its marker (last stable offset
    at the high watermark) and each offset it committed is no longer pending
    (an OffsetFetch requiring stable offsets is answered, as a consumer
    retries); the transaction's partitions are then forgotten."""
    producer = peer.state.get(slot)
    if producer is None:
        return
    deadline = time.monotonic() + ops.SETTLE_S
    for topic, partition in sorted(producer.in_transaction):
        while (seen := fetch_committed(peer, topic, partition, 0)) != CLOSED \
                and seen[0] == "ok" and seen[2] < seen[1]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{peer.name}: {topic}-{partition} keeps its LSO: {seen}")
            time.sleep(0.05)
    for group, topic, partition in sorted(producer.offsets):
        while (seen := ops.fetch_offset(peer, group, topic, partition, True)) != CLOSED \
                and seen[0] == UNSTABLE_OFFSET_COMMIT:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{peer.name}: {group} keeps {topic}-{partition} pending")
            time.sleep(0.05)
    producer.in_transaction.clear()
    producer.offsets.clear()
