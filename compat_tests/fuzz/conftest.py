"""The fuzzer's kcompat broker: configured as the reference Kafka runs
(``kafka_reference``: no initial rebalance delay for a new classic group, so
that a first JoinGroup is answered at once on both; empty groups without
offsets swept once a day, so that no comparison depends on when a sweep ran)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from compat_tests._broker import Broker, running

#: what the reference Kafka sets that kcompat's defaults do not
AS_THE_REFERENCE = ("--set", "group.initial.rebalance.delay.ms=0",
                    "--set", "offsets.retention.check.interval.ms=86400000")


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from running(Broker(tmp_path_factory.mktemp("fuzz-broker"),
                              extra_args=AS_THE_REFERENCE))
