"""Replay one difference the fuzzer found, with every observation printed.

Not collected by ``make test`` (the name does not start with ``test_``); run it
by path with the ``@reproduce_failure`` blob a long run printed::

    FZ_BLOB='AXic...' FUZZ_SECONDS=1 .venv/bin/python -m pytest -q -s \\
        compat_tests/fuzz/replay_blob.py -k one_node     # or -k three_brokers

(``FZ_VERSION``: the Hypothesis version the blob names, default the one
installed; ``FUZZ_SECONDS`` set so the long runs' rules are in, as when it was
found.) Each operation prints ``OBS <broker> <op>(<args>) -> <observation>``,
and each ShareFetch and ShareAcknowledge of a share consume loop
``<broker> FETCH|ACK m=<member> ep=<epoch> ... -> (error, [(topic id,
partition, error, ack error, [(first, last, delivery count)])])``: the two
brokers' answers request by request, where the compared observation only
holds a loop's totals. A replay that no longer differs ends in Hypothesis's
DidNotReproduce.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import hypothesis
import pytest
from hypothesis import HealthCheck, Phase, reproduce_failure, settings
from hypothesis.stateful import run_state_machine_as_test

from compat_tests._broker import Broker
from compat_tests._cluster import Cluster
from compat_tests.fuzz import _machine
from compat_tests.fuzz import _share_fetch as share_fetch
from compat_tests.fuzz._wire import Peer
from compat_tests.fuzz.test_fuzz_differential import clusters  # noqa: F401 - a fixture
from compat_tests.java.kafka_reference import KafkaReference, KafkaReferenceCluster


def _answered(answer: Any) -> tuple[Any, list[Any]]:
    parts = [(str(t.topic_id)[:4], p.partition_index, p.error_code,
              getattr(p, "acknowledge_error_code", None),
              [(r.first_offset, r.last_offset, r.delivery_count)
               for r in getattr(p, "acquired_records", ())])
             for t in getattr(answer, "responses", ()) or () for p in t.partitions]
    return getattr(answer, "error_code", answer), parts


def _traced(monkeypatch: pytest.MonkeyPatch) -> None:
    operation, fetch, ack = _machine.operation, share_fetch._share_fetch, share_fetch._share_ack

    def traced_operation(name: str) -> Callable[..., Any]:
        fn = operation(name)

        def run(peer: Peer, *args: Any) -> Any:
            out = fn(peer, *args)
            print(f"OBS {peer.name} {name}{args!r} -> {out!r}"[:4000], flush=True)
            return out
        return run

    def traced_fetch(peer: Peer, group: str, member: Any, address: str | None, epoch: int,
                     *rest: Any, **kw: Any) -> Any:
        answer = fetch(peer, group, member, address, epoch, *rest, **kw)
        print(f"  {peer.name} FETCH m={member.member_id[:4]} @{address} ep={epoch} "
              f"{rest[1:]!r} -> {_answered(answer)}", flush=True)
        return answer

    def traced_ack(peer: Peer, group: str, member: Any, address: str | None, epoch: int,
                   *rest: Any) -> Any:
        answer = ack(peer, group, member, address, epoch, *rest)
        print(f"  {peer.name} ACK m={member.member_id[:4]} @{address} ep={epoch} "
              f"{rest[1:]!r} -> {_answered(answer)}", flush=True)
        return answer

    monkeypatch.setattr(_machine, "operation", traced_operation)
    monkeypatch.setattr(share_fetch, "_share_fetch", traced_fetch)
    monkeypatch.setattr(share_fetch, "_share_ack", traced_ack)


def _replay(peers: list[Peer], replication: tuple[int, ...]) -> None:
    blob = os.environ.get("FZ_BLOB")
    if not blob:
        pytest.skip("FZ_BLOB not set: the @reproduce_failure blob to replay")
    version = os.environ.get("FZ_VERSION", hypothesis.__version__)
    machine = reproduce_failure(version, blob.encode())(_machine.machine_for(peers, replication))
    try:
        run_state_machine_as_test(machine, settings=settings(
            max_examples=1, stateful_step_count=50, deadline=None, database=None,
            phases=(Phase.explicit, Phase.reuse, Phase.generate),
            suppress_health_check=list(HealthCheck)))
    finally:
        for peer in peers:
            peer.close()


def test_one_node(kafka_reference: KafkaReference, fuzz_broker: Broker,
                  monkeypatch: pytest.MonkeyPatch) -> None:
    _traced(monkeypatch)
    _replay([Peer("kafka", kafka_reference.bootstrap), Peer("kcompat", fuzz_broker.bootstrap)],
            (1, 2, -1))


def test_three_brokers(clusters: tuple[KafkaReferenceCluster, Cluster],  # noqa: F811
                       monkeypatch: pytest.MonkeyPatch) -> None:
    _traced(monkeypatch)
    kafka, kcompat = clusters
    _replay([Peer("kafka", kafka.bootstrap), Peer("kcompat", kcompat.bootstrap)],
            (1, 3, 4, -1))
