"""Produce (key 0), versions 3-12 parsed; 0-2 advertised (librdkafka feature
detection) but refused.

Quirks: librdkafka <= 2.0 sends v7, aiokafka v8, kafka-python v9, librdkafka 2.x
v10, Java 3.9 v11, Java 4 v12; v13 is never advertised (topic ids only).
acks=0 gets no response at all. acks=-1 answers only after the group-committed
fsync (``kcompat.flush.mode=acks_all``, the default); ``always`` also syncs
acks=1, ``never`` leaves flushing to the OS as Kafka does by default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.append import AppendResult, append_records
from kcompat.broker.context import RequestContext
from kcompat.broker.handlers._common import NO_THROTTLE, ms_to_datetime
from kcompat.broker.partition import Partition
from kcompat.broker.state import now_ms
from kcompat.wire.batch import BatchHeader


def _partition_response(ctx: RequestContext, index: int, result: AppendResult,
                        log_start: int) -> Any:
    return ctx.build(
        "PartitionProduceResponse",
        index=index,
        error_code=result.error,
        base_offset=result.base_offset,
        log_append_time=ms_to_datetime(result.log_append_time_ms)
        if result.log_append_time_ms >= 0 else None,
        log_start_offset=log_start,
        record_errors=(),
        error_message=result.message,
    )


def _txn_check(ctx: RequestContext, topic: str, index: int
               ) -> Callable[[BatchHeader], ErrorCode | None]:
    """KIP-890 part 1: a transactional batch must belong to an ongoing
    transaction of its producer that includes this partition."""
    def check(header: BatchHeader) -> ErrorCode | None:
        cluster = ctx.state.cluster
        if cluster is not None and not ctx.txns.serves_producer(header.producer_id):
            # cluster mode: another broker coordinates it (cluster.txn_verify asked it)
            accepted = cluster.verifier.accepts(topic, index, header)
            return None if accepted else ErrorCode.invalid_txn_state
        # the coordinator is here: the same answer it gives other brokers' leaders
        tid = ctx.txns.coordinator.by_producer.get(header.producer_id)
        if tid is None:
            return ErrorCode.invalid_txn_state
        code = ctx.txns.verify(tid, header.producer_id, header.producer_epoch, (topic, index))
        return None if code == ErrorCode.none else code
    return check


def _needs_sync(ctx: RequestContext, acks: int) -> bool:
    mode = ctx.state.config["kcompat.flush.mode"]
    return mode == "always" or (mode == "acks_all" and acks == -1)


async def handle(ctx: RequestContext, request: Any) -> Any:
    if ctx.state.cluster is not None:  # cluster mode: Raft proposals (kcompat.broker.cluster)
        from kcompat.broker.cluster import produce as cluster_produce

        return await cluster_produce.handle(ctx, request)
    state = ctx.state
    acks = request.acks
    now = now_ms()
    results: list[tuple[str, list[tuple[int, AppendResult, Partition | None]]]] = []
    for topic in request.topic_data:
        meta = state.topics.get(topic.name)
        rows: list[tuple[int, AppendResult, Partition | None]] = []
        for pdata in topic.partition_data:
            part = state.partition(topic.name, pdata.index)
            if acks not in (-1, 0, 1):
                result = AppendResult(ErrorCode.invalid_required_acks)
            elif meta is None or part is None:
                result = AppendResult(ErrorCode.unknown_topic_or_partition)
            else:
                result = append_records(part, pdata.records, meta.configs,
                                        state.broker_defaults, now,
                                        _txn_check(ctx, topic.name, pdata.index))
                state.metrics.produced(topic.name, pdata.records, result.error == ErrorCode.none)
            rows.append((pdata.index, result, part))
        results.append((topic.name, rows))
    written = [p for _n, rows in results for _i, r, p in rows
               if p is not None and r.error == ErrorCode.none]
    if written and _needs_sync(ctx, acks):
        try:
            await state.flusher.sync(*[p.log for p in written])
        except OSError:
            results = [(n, [(i, AppendResult(ErrorCode.kafka_storage_error)
                             if r.error == ErrorCode.none else r, p) for i, r, p in rows])
                       for n, rows in results]
    if acks == 0:
        return None
    topics = tuple(
        ctx.build("TopicProduceResponse", name=name, partition_responses=tuple(
            # Kafka answers log_start_offset -1 for a rejected batch (FINDINGS.md, D6).
            _partition_response(ctx, i, r, p.log.log_start_offset
                                if p and r.error == ErrorCode.none else -1)
            for i, r, p in rows))
        for name, rows in results
    )
    return ctx.response(responses=topics, throttle_time=NO_THROTTLE)
