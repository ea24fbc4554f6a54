"""A handler that raises an unexpected exception: the broker answers the
request as Kafka does (``getErrorResponse``: UNKNOWN_SERVER_ERROR in its error
fields, the request's items named back) and the connection stays open for the
next request (``node.connection``). Before, the connection was closed.

A broker runs in-process on a real socket; one handler is replaced by one that
raises (the fault injected, the connection code under test is the real one);
requests and answers go through kafka-python's codec, not kcompat's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from kcompat.broker.config import broker_config
from kcompat.broker.handlers import HANDLERS
from kcompat.broker.host.broker import Broker
from kcompat.broker.host.context import Later
from kcompat.broker.node import connection, server
from kcompat.wire import versions as v
from tests.integration._raw import RawConnection

UNKNOWN_SERVER_ERROR = -1


async def _boom(_ctx: Any, _request: Any) -> Any:
    raise RuntimeError("a bug in the handler")


async def _boom_later(_ctx: Any, _request: Any) -> Later:
    async def finish() -> Any:
        raise KeyError("a bug after the handler returned")
    return Later(finish)


def _against_broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                    talk: Callable[[str], Any]) -> tuple[Any, Broker]:
    """``talk(bootstrap)`` (blocking, in a thread) against a broker in this
    process; what it returned, and the broker."""
    cfg = broker_config.load(None, {"log.dirs": str(tmp_path), "port": 0, "admin.port": -1}, {})
    made: list[Broker] = []

    class Kept(Broker):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(server, "Broker", Kept)
    result: list[Any] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.run_broker, cfg)
            result.append(await trio.to_thread.run_sync(talk, f"127.0.0.1:{port}"))
            nursery.cancel_scope.cancel()

    trio.run(main)
    return result[0], made[0]


def _produce() -> Any:
    data = ProduceRequest[8].TopicProduceData
    return ProduceRequest[8](transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        data(name="t1", partition_data=[data.PartitionProduceData(index=0, records=None),
                                        data.PartitionProduceData(index=3, records=None)])])


def _list_offsets() -> Any:
    topic = ListOffsetsRequest[4].ListOffsetsTopic
    return ListOffsetsRequest[4](replica_id=-1, isolation_level=0, topics=[topic(
        name="t2", partitions=[topic.ListOffsetsPartition(
            partition_index=1, current_leader_epoch=-1, timestamp=-1)])])


@pytest.mark.parametrize("failing", [_boom, _boom_later], ids=["raises", "later-raises"])
def test_a_failing_handler_is_answered_unknown_server_error_and_the_connection_stays(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        failing: Callable[[Any, Any], Any]) -> None:
    monkeypatch.setitem(HANDLERS, v.PRODUCE, failing)
    monkeypatch.setitem(HANDLERS, v.LIST_OFFSETS, failing)

    def talk(bootstrap: str) -> tuple[Any, Any, Any]:
        conn = RawConnection(bootstrap)
        try:
            produced = conn.request(_produce(), ProduceResponse[8])
            listed = conn.request(_list_offsets(), ListOffsetsResponse[4])
            versions = conn.request(ApiVersionsRequest[3](
                client_software_name="t", client_software_version="1"), ApiVersionsResponse[3])
            return produced, listed, versions
        finally:
            conn.close()

    (produced, listed, versions), broker = _against_broker(tmp_path, monkeypatch, talk)
    assert [(t.name, [(p.index, p.error_code, p.base_offset) for p in t.partition_responses])
            for t in produced.responses] == [("t1", [(0, UNKNOWN_SERVER_ERROR, -1),
                                                     (3, UNKNOWN_SERVER_ERROR, -1)])]
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions])
            for t in listed.topics] == [("t2", [(1, UNKNOWN_SERVER_ERROR)])]
    # Kafka's message for the error, never the exception's (no internals exposed)
    assert {p.error_message for t in produced.responses for p in t.partition_responses} == {
        connection.UNKNOWN_SERVER_ERROR_MESSAGE}
    assert versions.error_code == 0 and versions.api_keys  # the same connection, still open
    failures = {s.labels["api"]: s.value for metric in broker.metrics.failures.collect()
                for s in metric.samples if s.name.endswith("_total")}
    assert failures == {"Produce": 1, "ListOffsets": 1}
