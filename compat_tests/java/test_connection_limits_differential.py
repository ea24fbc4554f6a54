"""Differential: connection limits, Apache Kafka 4.4 against kcompat.

Connections come from other loopback addresses (127.0.0.2, 127.0.0.3: Linux
answers every 127/8 address), so the limits set here touch nobody else on the
shared reference broker.

* ``max.connections.per.ip.overrides`` set dynamically to ``127.0.0.2:2`` (the
  cluster default, IncrementalAlterConfigs): of three connections from
  127.0.0.2 held open, the third is closed unanswered; once one closes, a new
  one is served. Kafka applies the change a moment after it answers, so the
  trial is repeated until the limit shows (bounded).
* ``connection_creation_rate`` 2 for the ip entity 127.0.0.3 (AlterClientQuotas):
  connections opened and closed one after another are served until the rate,
  measured as Kafka measures it (11 windows of 1 s, the first 10 padded), goes
  over 2 a second — the 21st — which is closed unanswered.

A connection counts as served when it answers ApiVersions.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import pytest
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from kafka.protocol.metadata.api_versions import ApiVersionsRequest

from compat_tests._broker import Broker
from compat_tests.java._differential import BROKER, call, incremental_alter, kcompat_with
from compat_tests.java.kafka_reference import KafkaReference

OVERRIDES = "max.connections.per.ip.overrides"
SET, DELETE = 0, 1
LIMITED, RATED = "127.0.0.2", "127.0.0.3"


def _open(bootstrap: str, source: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5, source_address=(source, 0))


def _served(sock: socket.socket) -> bool:
    """Does the connection answer ApiVersions? (A refused one is closed: EOF.)"""
    req = ApiVersionsRequest[0]()
    req.with_header(correlation_id=1, client_id="limits")
    body = bytes(req.encode(header=True))
    try:
        sock.sendall(struct.pack(">i", len(body)) + body)
        return len(sock.recv(4)) == 4
    except OSError:
        return False


def _held_open(bootstrap: str) -> list[bool]:
    socks = [_open(bootstrap, LIMITED) for _ in range(3)]
    try:
        served = [_served(s) for s in socks]
        socks[0].close()
        again = _open(bootstrap, LIMITED)
        try:
            return [*served, _served(again)]
        finally:
            again.close()
    finally:
        for s in socks:
            s.close()


def _ip_quota(bootstrap: str, ip: str, value: float | None) -> None:
    entry = AlterClientQuotasRequest.EntryData
    req = AlterClientQuotasRequest(version=0, validate_only=False, entries=[entry(
        entity=[entry.EntityData(entity_type="ip", entity_name=ip)],
        ops=[entry.OpData(key="connection_creation_rate", value=value or 0.0,
                          remove=value is None)])])
    assert [e.error_code for e in call(bootstrap, req, AlterClientQuotasResponse[0]).entries] \
        == [0]


def _ip_quota_known(bootstrap: str, ip: str) -> None:
    R = DescribeClientQuotasRequest
    req = R[1](components=[R.ComponentData(entity_type="ip", match_type=0, match=ip)],
               strict=False)
    deadline = time.monotonic() + 15
    while not call(bootstrap, req, DescribeClientQuotasResponse[1]).entries:
        assert time.monotonic() < deadline, f"{bootstrap} never described the quota of {ip}"
        time.sleep(0.05)


def run_script(bootstrap: str) -> dict[str, object]:
    obs: dict[str, object] = {"unlimited": _held_open(bootstrap)}
    assert incremental_alter(bootstrap, "", [(OVERRIDES, SET, f"{LIMITED}:2")], False,
                             BROKER) == (0, None)
    try:
        deadline = time.monotonic() + 15
        while (seen := _held_open(bootstrap)) != [True, True, False, True] \
                and time.monotonic() < deadline:
            time.sleep(0.1)  # not applied yet (Kafka applies it after answering)
        obs["per_ip_limit"] = seen
    finally:
        assert incremental_alter(bootstrap, "", [(OVERRIDES, DELETE, None)], False,
                                 BROKER) == (0, None)
    _ip_quota(bootstrap, RATED, 2.0)
    try:
        _ip_quota_known(bootstrap, RATED)
        served = 0
        while served < 40:
            sock = _open(bootstrap, RATED)
            try:
                if not _served(sock):
                    break
            finally:
                sock.close()
            served += 1
        obs["served_before_the_rate_refused"] = served
    finally:
        _ip_quota(bootstrap, RATED, None)
    return obs


@pytest.fixture(scope="module")
def kcompat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from kcompat_with(tmp_path_factory.mktemp("connection-limits"), {})


@pytest.fixture(scope="module")
def answers(kafka_reference: KafkaReference, kcompat: Broker) -> dict[str, dict[str, object]]:
    return {"kafka": run_script(kafka_reference.bootstrap),
            "kcompat": run_script(kcompat.bootstrap)}


def test_the_reference_enforced_both_limits(answers: dict[str, dict[str, object]]) -> None:
    kafka = answers["kafka"]
    assert kafka["unlimited"] == [True, True, True, True]
    assert kafka["per_ip_limit"] == [True, True, False, True]
    assert kafka["served_before_the_rate_refused"] == 20


@pytest.mark.parametrize("step", ["unlimited", "per_ip_limit", "served_before_the_rate_refused"])
def test_step_matches_kafka(answers: dict[str, dict[str, object]], step: str) -> None:
    assert answers["kcompat"][step] == answers["kafka"][step], step
