"""CreatePartitions retried (issue 32): what a client sees when it repeats an
increase whose first answer it lost to a timeout — Apache Kafka 4.4's
INVALID_PARTITIONS "Topic already has N partition(s).", ``validate_only``
too — and that a retry racing its first attempt on the controller neither
succeeds twice nor opens the new partitions a second time. The same answers
from Kafka itself: compat_tests/java/test_create_partitions_differential.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.config import broker_config
from kcompat.broker.controller import metadata_apply
from kcompat.broker.handlers import HANDLERS
from kcompat.broker.host.broker import Broker
from kcompat.broker.host.context import RequestContext
from kcompat.testing import running
from kcompat.wire import codec
from kcompat.wire import versions as v
from tests.unit.broker.test_admin_handlers import call, create, versions

E = ErrorCode
ALREADY_3 = "Topic already has 3 partition(s)."


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(broker_config.load(None, {"log.dirs": str(tmp_path)}, {}))
    yield b
    b.close()


def _request(version: int, name: str, count: int, validate_only: bool = False) -> Any:
    m = codec.request_module(v.CREATE_PARTITIONS, version)
    return m.CreatePartitionsRequest(timeout=5000, validate_only=validate_only, topics=(
        m.CreatePartitionsTopic(name=name, count=count, assignments=None),))


def _answer(broker: Broker, version: int, name: str, count: int,
            validate_only: bool = False) -> tuple[ErrorCode, str | None]:
    r = call(broker, v.CREATE_PARTITIONS, version,
             lambda _m: _request(version, name, count, validate_only))
    [result] = r.results
    return result.error_code, result.error_message


@pytest.mark.parametrize("version", versions(v.CREATE_PARTITIONS))
def test_a_retry_of_a_carried_out_increase_sees_kafkas_answer(broker: Broker,
                                                              version: int) -> None:
    create(broker, "cp", 1)
    assert _answer(broker, version, "cp", 3, validate_only=True) == (E.none, None)
    assert _answer(broker, version, "cp", 3) == (E.none, None)
    assert _answer(broker, version, "cp", 3) == (E.invalid_partitions, ALREADY_3)
    assert _answer(broker, version, "cp", 3, validate_only=True) == (
        E.invalid_partitions, ALREADY_3)
    lower = ("The topic cp currently has 3 partition(s); 2 would not be an increase.")
    assert _answer(broker, version, "cp", 2) == (E.invalid_partitions, lower)
    assert _answer(broker, version, "cp", 2, validate_only=True) == (E.invalid_partitions, lower)
    assert _answer(broker, version, "nope", 3) == (E.unknown_topic_or_partition, None)
    assert broker.state.topics["cp"].partitions == 3


def test_a_retry_racing_its_first_attempt_is_refused_and_opens_nothing(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both attempts reach the controller before the first one's record is
    committed: the second is decided after it, against the count it left
    (before: both answered NONE, and partitions 1 and 2 were opened twice, the
    second time under other Raft group ids)."""
    create(broker, "race", 1)
    version = v.API_RANGES[v.CREATE_PARTITIONS].max_version
    answers: list[tuple[ErrorCode, str | None]] = []
    opened: list[tuple[str, int]] = []
    real_open = metadata_apply._open_partition

    def counting_open(rt: Any, meta: Any, index: int, *args: Any) -> Any:
        opened.append((meta.name, index))
        return real_open(rt, meta, index, *args)

    monkeypatch.setattr(metadata_apply, "_open_partition", counting_open)

    async def attempt() -> None:
        ctx = RequestContext(broker, v.CREATE_PARTITIONS, version, 7, "test")
        r = await HANDLERS[v.CREATE_PARTITIONS](ctx, _request(version, "race", 3))
        answers.append((r.results[0].error_code, r.results[0].error_message))

    async def both() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(attempt)
            nursery.start_soon(attempt)

    running.run(broker, both)
    assert sorted(answers, key=repr) == sorted([(E.none, None), (E.invalid_partitions, ALREADY_3)],
                                               key=repr)
    assert broker.state.topics["race"].partitions == 3
    assert opened == [("race", 1), ("race", 2)]
