"""AlterReplicaLogDirs in-process at every advertised version: the answers
Apache Kafka 4.4 gives on a broker with one log dir (kafka-python's admin
``alter_replica_log_dirs`` saw its connection closed before: no handler). The
same calls against Kafka itself: compat_tests/java/test_log_dirs_differential.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kcompat.broker.config import broker_config
from kcompat.broker.host.broker import Broker
from kcompat.wire import versions as v
from tests.unit.broker.test_admin_handlers import call, create, versions

E = ErrorCode


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(broker_config.load(None, {"log.dirs": str(tmp_path)}, {}))
    yield b
    b.close()


def _alter(broker: Broker, version: int,
           dirs: list[tuple[str, list[tuple[str, list[int]]]]]) -> list[tuple[str, int, str]]:
    def make(m: ModuleType) -> Any:
        return m.AlterReplicaLogDirsRequest(dirs=tuple(
            m.AlterReplicaLogDir(path=path, topics=tuple(
                m.AlterReplicaLogDirTopic(name=t, partitions=tuple(ps)) for t, ps in topics))
            for path, topics in dirs))

    r = call(broker, v.ALTER_REPLICA_LOG_DIRS, version, make)
    return sorted((t.topic_name, p.partition_index, p.error_code.name)
                  for t in r.results for p in t.partitions)


@pytest.mark.parametrize("version", versions(v.ALTER_REPLICA_LOG_DIRS))
def test_answers_per_partition_as_kafka_with_one_log_dir(broker: Broker, version: int) -> None:
    create(broker, "ld", 2)
    here = str(broker.state.data_dir.resolve())
    # the dir the replicas are in: nothing to do; unknown partitions and topics
    assert _alter(broker, version, [(here, [("ld", [0, 1, 7]), ("nope", [0])])]) == [
        ("ld", 0, "none"), ("ld", 1, "none"), ("ld", 7, "unknown_topic_or_partition"),
        ("nope", 0, "unknown_topic_or_partition")]
    # not one of the broker's log dirs (exactly its path): for every partition
    for path in ("/no/such/dir", here + "/", "relative"):
        assert _alter(broker, version, [(path, [("ld", [0]), ("nope", [0])])]) == [
            ("ld", 0, "log_dir_not_found"), ("nope", 0, "log_dir_not_found")], path
    # a partition named under two dirs is answered once, for the last
    assert _alter(broker, version, [(here, [("ld", [0])]), ("/x", [("ld", [0])])]) == [
        ("ld", 0, "log_dir_not_found")]
    assert _alter(broker, version, []) == []
    # a future log's directory name would pass 255 bytes
    assert _alter(broker, version, [(here, [("t" * 215, [0])])]) == [
        ("t" * 215, 0, "invalid_topic_exception")]


def test_a_partition_held_by_other_brokers_is_replica_not_available(broker: Broker) -> None:
    """Kafka's NOT_LEADER_OR_FOLLOWER (the cluster knows the partition, this broker
    holds no replica), answered as REPLICA_NOT_AVAILABLE for this API."""
    create(broker, "ld", 2)
    here = str(broker.state.data_dir.resolve())
    held = broker.state.partitions.pop(("ld", 1))  # as if assigned to another broker
    try:
        assert _alter(broker, 2, [(here, [("ld", [0, 1])])]) == [
            ("ld", 0, "none"), ("ld", 1, "replica_not_available")]
    finally:
        broker.state.partitions[("ld", 1)] = held
