"""A restarted broker answers clients only once it has caught up.

Kafka opens a broker's client listeners only after it has replayed the
metadata log. kcompat's listener is open from the start (its Raft peers need
it), so it holds client requests until the broker first serves. Answered
early, a restarted broker called an existing topic unknown: UNKNOWN_TOPIC_ID
to a ShareFetch, and librdkafka's share consumer then dropped that partition
from its session for good (a 3-broker soak with a leader kill, 2026-12-01).

The window is made deterministic: the other two brokers are stopped
(SIGSTOP) while the victim restarts, so it cannot catch up until they resume.
Requests sent meanwhile must wait, then answer as a caught-up broker does.
"""

from __future__ import annotations

import datetime
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v17 import request as fetch
from kio.schema.share_fetch.v1 import request as share_fetch

from compat_tests._broker import unique_topic
from compat_tests._cluster import Cluster
from kcompat.cli._kio import Cluster as KioCluster
from kcompat.cli._kio import Connection

STOPPED_S = 1.5  # how long the victim's peers stay stopped after it listens
UNKNOWN = (ErrorCode.unknown_topic_id, ErrorCode.unknown_topic_or_partition)


def _fetch(topic_id: uuid.UUID) -> Any:
    return fetch.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=100), min_bytes=1,
        topics=(fetch.FetchTopic(topic_id=topic_id, partitions=(fetch.FetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=())


def _share_fetch(topic_id: uuid.UUID) -> Any:
    return share_fetch.ShareFetchRequest(
        group_id=unique_topic("gate-g"), member_id=uuid.uuid4().hex, share_session_epoch=0,
        max_wait=datetime.timedelta(milliseconds=100), min_bytes=1, max_bytes=1 << 20,
        max_records=10, batch_size=10, forgotten_topics_data=(),
        topics=(share_fetch.FetchTopic(topic_id=topic_id, partitions=(
            share_fetch.FetchPartition(partition_index=0, acknowledgement_batches=()),)),))


def _codes(answer: Any) -> list[Any]:
    return [p.error_code for t in answer.responses for p in t.partitions]


def _in_thread(call: Callable[[], Any]) -> Callable[[], tuple[Any, float]]:
    """Run ``call`` now; the returned function joins it: (answer, monotonic time)."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["answer"] = call()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e
        out["at"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def join() -> tuple[Any, float]:
        thread.join(30)
        assert not thread.is_alive(), "no answer within 30 s"
        if "error" in out:
            raise out["error"]
        return out["answer"], out["at"]
    return join


def test_a_restarted_broker_answers_once_caught_up(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path).start()
    try:
        topic = unique_topic("gate")
        cluster.create_topic(topic, 1, 3)
        kio = KioCluster(cluster.bootstrap, 10.0)
        try:
            topic_id = kio.topics([topic])[topic].topic_id
        finally:
            kio.close()
        victim = cluster.brokers[3]
        others = [b.pid for n, b in cluster.brokers.items() if n != 3]
        victim.kill()
        for pid in others:
            assert pid is not None
            os.kill(pid, signal.SIGSTOP)
        try:
            victim.start()  # listening: the ready line
            connections = [Connection(victim.host, victim.port, 30.0) for _ in range(2)]
            fetched = _in_thread(lambda: connections[0].call(_fetch(topic_id)))
            shared = _in_thread(lambda: connections[1].call(_share_fetch(topic_id)))
            time.sleep(STOPPED_S)
        finally:
            resumed = time.monotonic()
            for pid in others:
                os.kill(pid, signal.SIGCONT)
        try:
            (fetch_answer, fetch_at), (share_answer, share_at) = fetched(), shared()
        finally:
            for conn in connections:
                conn.close()
        print(f"answered {fetch_at - resumed:.2f} s (Fetch) and {share_at - resumed:.2f} s "
              f"(ShareFetch) after the peers resumed: {_codes(fetch_answer)} "
              f"{_codes(share_answer)}")
        assert fetch_at > resumed and share_at > resumed, "answered while it could not catch up"
        assert _codes(fetch_answer) and not set(_codes(fetch_answer)) & set(UNKNOWN), fetch_answer
        assert share_answer.error_code == ErrorCode.none, share_answer
        assert _codes(share_answer) and not set(_codes(share_answer)) & set(UNKNOWN), share_answer
    finally:
        cluster.kill()
