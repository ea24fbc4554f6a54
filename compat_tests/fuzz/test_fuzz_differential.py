"""The differential fuzzer against Apache Kafka (``_machine``): random sequences
of client operations done to Kafka 4.4.0 and to kcompat, whose observations
must agree.

In ``make test``: a short, derandomized run on one node (the same sequences
every run, so a failure is a regression, not luck). ``make fuzz`` runs it for
``FUZZ_SECONDS`` (default 1800) per side with fresh random sequences
(``FUZZ_SIDE``: single, cluster, acls or both — single and cluster; the
cluster side compares three kcompat brokers at RF 3 with three Kafka
brokers; the acls side one broker of each with an authorizer, where the
sequences also change ACLs and act as a user they name). A difference shrinks to a
minimal sequence of rules, printed; write it down in compat_tests/FINDINGS.md
and make it a regression test. ``replay_blob.py`` replays one from its
``@reproduce_failure`` blob with both brokers' answers printed, request by
request (``FUZZ_NO_SHRINK=1`` stops a long run at its first difference).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from compat_tests._broker import Broker, free_port
from compat_tests._cluster import Cluster
from compat_tests.fuzz._machine import machine_for
from compat_tests.fuzz._wire import Peer
from compat_tests.fuzz.conftest import AS_THE_REFERENCE
from compat_tests.java import test_authorization_differential as authz
from compat_tests.java.kafka_reference import KafkaReference, KafkaReferenceCluster

LONG = os.environ.get("FUZZ_SECONDS")
SIDES = os.environ.get("FUZZ_SIDE", "both")
#: exploring: the first failure as it happened, not shrunk (FUZZ_NO_SHRINK=1)
PHASES = tuple(Phase)[:-2] if os.environ.get("FUZZ_NO_SHRINK") else tuple(Phase)
# a long run outlasts the suite's per-test timeout (pyproject.toml): its own, then
pytestmark = pytest.mark.timeout(float(LONG) + 900 if LONG else 300)


def _run(peers: list[Peer], replication: tuple[int, ...], *, examples: int, steps: int,
         derandomize: bool, alice: list[Peer] | None = None) -> None:
    machine = machine_for(peers, replication, alice=alice)
    run_state_machine_as_test(machine, settings=settings(
        max_examples=examples, stateful_step_count=steps, deadline=None,
        derandomize=derandomize, database=None, print_blob=True, phases=PHASES,
        suppress_health_check=list(HealthCheck)))


def _fuzz(peers: list[Peer], replication: tuple[int, ...], alice: list[Peer] | None = None,
          short: tuple[int, int] = (10, 40)) -> None:
    if LONG is None:
        _run(peers, replication, examples=short[0], steps=short[1], derandomize=True,
             alice=alice)
        return
    deadline = time.monotonic() + float(LONG)
    rounds = 0
    while time.monotonic() < deadline:
        _run(peers, replication, examples=20, steps=50, derandomize=False, alice=alice)
        rounds += 1
    print(f"fuzz: {rounds * 20} sequences of up to 50 operations without a difference")


def test_fuzz_one_node(kafka_reference: KafkaReference, fuzz_broker: Broker) -> None:
    if LONG is not None and SIDES not in ("single", "both"):
        pytest.skip(f"FUZZ_SIDE={SIDES}")
    peers = [Peer("kafka", kafka_reference.bootstrap), Peer("kcompat", fuzz_broker.bootstrap)]
    try:
        _fuzz(peers, (1, 2, -1))
    finally:
        for peer in peers:
            peer.close()


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[KafkaReferenceCluster, Cluster]]:
    kafka = KafkaReferenceCluster(Path(tmp_path_factory.mktemp("fuzz-kafka-cluster")))
    kcompat = Cluster(Path(tmp_path_factory.mktemp("fuzz-kcompat-cluster")),
                      extra_args=AS_THE_REFERENCE)
    kafka.start()
    try:
        kcompat.start()
        try:
            yield kafka, kcompat
        finally:
            kcompat.close()
    finally:
        kafka.close()


@pytest.mark.skipif(LONG is None or SIDES == "single",
                    reason="the 3-broker fuzz runs in make fuzz (FUZZ_SECONDS), not make test")
def test_fuzz_three_brokers(clusters: tuple[KafkaReferenceCluster, Cluster]) -> None:
    kafka, kcompat = clusters
    peers = [Peer("kafka", kafka.bootstrap), Peer("kcompat", kcompat.bootstrap)]
    try:
        _fuzz(peers, (1, 3, 4, -1))
    finally:
        for peer in peers:
            peer.close()


@pytest.fixture(scope="module")
def authorizing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str, str]]:
    """One Kafka broker and one kcompat broker with the standard authorizer,
    set as the authorization differential sets them (``User:ANONYMOUS`` on
    PLAINTEXT a super user, alice a SASL/PLAIN user): their PLAINTEXT and
    SASL_PLAINTEXT addresses, Kafka's then kcompat's."""
    kafka_ports, controller = authz._ports(), free_port(authz.HOST)
    props = authz.settings(kafka_ports)
    props["listeners"] += f",CONTROLLER://{authz.HOST}:{controller}"
    props["listener.security.protocol.map"] += ",CONTROLLER:PLAINTEXT"
    kafka = KafkaReference(Path(tmp_path_factory.mktemp("fuzz-authz-kafka")),
                           port=kafka_ports["PLAINTEXT"], controller_port=controller,
                           overrides=props).start()
    try:
        work = tmp_path_factory.mktemp("fuzz-authz-kcompat")
        ports = authz._ports()
        config = work / "broker.yaml"
        config.write_text(yaml.safe_dump({**authz.settings(ports), "admin.port": "-1",
                                          "offsets.retention.check.interval.ms": "86400000"}))
        kcompat = Broker(work / "broker", port=ports["PLAINTEXT"],
                         extra_args=("--config", str(config))).start()
        try:
            yield (kafka.bootstrap, f"{authz.HOST}:{kafka_ports['SASL_PLAINTEXT']}",
                   kcompat.bootstrap, f"{authz.HOST}:{ports['SASL_PLAINTEXT']}")
        finally:
            kcompat.stop()
    finally:
        kafka.close()


@pytest.mark.skipif(LONG is not None and SIDES != "acls",
                    reason="the ACL fuzz runs in make fuzz with FUZZ_SIDE=acls")
def test_fuzz_acls_one_node(authorizing: tuple[str, str, str, str]) -> None:
    kafka, kafka_sasl, kcompat, kcompat_sasl = authorizing
    alice_secret = ("alice", "alice-secret")
    peers = [Peer("kafka", kafka), Peer("kcompat", kcompat)]
    alice = [Peer("kafka as alice", kafka_sasl, alice_secret),
             Peer("kcompat as alice", kcompat_sasl, alice_secret)]
    try:
        _fuzz(peers, (1, -1), alice, short=(5, 30))
    finally:
        for peer in peers + alice:
            peer.close()
