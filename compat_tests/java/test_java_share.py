"""Share groups (KIP-932) with Java ``KafkaShareConsumer`` (kafka-clients 4.4, explicit
acknowledgement mode) against the reference Apache Kafka 4.4 broker and against kcompat
(``sbroker`` kind ``single``; at ``rf3`` the release/reject case is
``test_share_mixed_clients``): the same scenarios, the same checks.

``ShareScenario`` (compat_tests/java/clients) creates a 2-partition topic, sets the
group's ``share.auto.offset.reset=earliest`` through IncrementalAlterConfigs on a GROUP
resource (Kafka starts a new share group at the latest offset otherwise), produces
``RECORDS`` records ``k<i>``/``v<i>`` to partition ``i % 2`` and runs share consumers in
one JVM:

* ``release-reject``: three consumers in one share group. Record ``i % 10 == 7`` is
  RELEASEd on its first delivery and must come back with delivery count 2 (then
  ACCEPTed); ``i % 10 == 3`` is REJECTed and never comes back; every other record is
  ACCEPTed at delivery count 1. Every record is finally acknowledged exactly once,
  nothing is delivered that was not produced, and no acknowledgement reports an error
  (consumer 0 acknowledges with ``commitSync`` = ShareAcknowledge, the others on their
  next poll = piggybacked on ShareFetch, and in ``close``).
* ``killed-holder``: with ``share.record.lock.duration.ms`` = ``LOCK_MS``, a consumer in a
  child JVM acquires records and halts without acknowledging or closing; two consumers
  then get everything: each record the dead one held comes back with delivery count 2,
  and every record is ACCEPTed exactly once.

Kafka 4.4 serves share groups as formatted (``share.version`` 2 is the default of
metadata version 4.4-IV0); the record lock duration a group may set is bounded below by
the broker's ``group.share.min.record.lock.duration.ms`` (default 15000), which the
session's reference broker lowers to 1000 (``conftest.kafka_reference``).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from typing import Any

import pytest

from compat_tests._deployment import Deployment
from compat_tests.java.conftest import PKG, JavaRun, run_java
from compat_tests.java.kafka_reference import KafkaReference

pytestmark = pytest.mark.timeout(150)

PARTITIONS = 2
RECORDS = 100
CONSUMERS = 3
SURVIVORS = 2
#: the consumers keep polling this long after everything was acknowledged (redeliveries)
SETTLE_MS = 1500
MAX_WAIT_MS = 30_000
#: ``share.record.lock.duration.ms`` of the killed-holder group
LOCK_MS = 2000
SCENARIOS = ("release-reject", "killed-holder")

Events = list[dict[str, Any]]


def run_scenario(scenario: str, bootstrap: str, replication: int, topic: str,
                 clients_cp: str) -> tuple[JavaRun, Events]:
    consumers = CONSUMERS if scenario == "release-reject" else SURVIVORS
    args = [scenario, bootstrap, topic, str(PARTITIONS), str(replication), str(RECORDS),
            f"share-{topic}", str(consumers), str(SETTLE_MS), str(MAX_WAIT_MS)]
    if scenario == "killed-holder":
        args.append(str(LOCK_MS))
    run = run_java(clients_cp, f"{PKG}.ShareScenario", *args, timeout=110)
    events = run.json_lines()
    failed = [e for e in events if e["event"] == "failed"]
    assert not failed, f"{failed[:3]}\n{run.explain()}"
    ack_errors = [e for e in events if (e["event"] == "ack_callback" and e["error"])
                  or (e["event"] == "committed" and e["errors"])]
    assert not ack_errors, f"acknowledgements failed: {ack_errors[:3]}\n{run.explain()}"
    assert run.returncode == 0, run.explain()
    return run, events


def deliveries_by_index(events: Events) -> dict[int, Events]:
    """The consumers' deliveries of each produced record (``v<i>`` -> ``i``), in
    delivery-count order; checks that nothing unknown was delivered and that each
    delivery names the record's key, partition and offset."""
    by_index: dict[int, Events] = defaultdict(list)
    for e in events:
        if e["event"] == "delivered":
            by_index[int(e["value"][1:])].append(e)
    alien = sorted(set(by_index) - set(range(RECORDS)))
    assert not alien, f"records nobody produced: {alien[:5]}"
    for i, got in by_index.items():
        got.sort(key=lambda d: d["delivery_count"])
        where = {(d["key"], d["partition"], d["offset"]) for d in got}
        assert where == {(f"k{i}", i % PARTITIONS, i // PARTITIONS)}, (i, where)
    return by_index


def check_release_reject(events: Events) -> str:
    by_index = deliveries_by_index(events)
    missing = sorted(set(range(RECORDS)) - set(by_index))
    assert not missing, f"never delivered: {missing[:10]}"
    for i in range(RECORDS):
        got = [(d["delivery_count"], d["ack"]) for d in by_index[i]]
        if i % 10 == 3:
            want = [(1, "REJECT")]
        elif i % 10 == 7:
            want = [(1, "RELEASE"), (2, "ACCEPT")]
        else:
            want = [(1, "ACCEPT")]
        assert got == want, f"v{i}: (delivery count, acknowledgement) {got}, expected {want}"
    per_consumer = Counter(e["consumer"] for e in events if e["event"] == "delivered")
    return f"deliveries per consumer {dict(sorted(per_consumer.items()))}"


def check_killed_holder(events: Events) -> str:
    held = {int(e["value"][1:]): e for e in events if e["event"] == "victim_got"}
    halt = [e for e in events if e["event"] == "victim_halt"]
    assert held and len(halt) == 1, "the victim acquired nothing before it halted"
    assert {e["delivery_count"] for e in held.values()} == {1}, held
    by_index = deliveries_by_index(events)
    missing = sorted(set(range(RECORDS)) - set(by_index))
    assert not missing, f"never delivered to the survivors: {missing[:10]}"
    for i in range(RECORDS):
        got = [(d["delivery_count"], d["ack"]) for d in by_index[i]]
        # A record the victim had fetched but not yet returned from poll() was acquired
        # by it too: delivery count 2 is right for those as well.
        first = 2 if i in held else got[0][0]
        assert got == [(first, "ACCEPT")] and first in (1, 2), (
            f"v{i}{' (held by the killed consumer)' if i in held else ''}: "
            f"(delivery count, acknowledgement) {got}")
    back_ms = [by_index[i][0]["ms"] - halt[0]["ms"] for i in held]
    in_flight = sum(1 for i, d in by_index.items() if i not in held and d[0]["delivery_count"] == 2)
    return (f"victim held {len(held)} records (+{in_flight} fetched, not yet polled); "
            f"redelivered {min(back_ms)}-{max(back_ms)} ms after it halted "
            f"(lock {LOCK_MS} ms)")


def check(scenario: str, events: Events) -> str:
    if scenario == "release-reject":
        return check_release_reject(events)
    return check_killed_holder(events)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_share_group_on_reference_kafka(kafka_reference: KafkaReference, scenario: str,
                                        topic: str, clients_cp: str) -> None:
    t0 = time.monotonic()
    _run, events = run_scenario(scenario, kafka_reference.bootstrap, 1, topic, clients_cp)
    summary = check(scenario, events)
    print(f"Apache Kafka {kafka_reference.version} {scenario}: {summary}; "
          f"{time.monotonic() - t0:.1f} s")


@pytest.mark.parametrize(("sbroker", "scenario"), [
    ("single", "release-reject"), ("single", "killed-holder")], indirect=["sbroker"])
# rf3: release/reject in test_share_mixed_clients, lock expiry in the chaos test
def test_share_group_on_kcompat(sbroker: Deployment, scenario: str, topic: str,
                                clients_cp: str) -> None:
    t0 = time.monotonic()
    _run, events = run_scenario(scenario, sbroker.bootstrap, sbroker.replication, topic,
                                clients_cp)
    summary = check(scenario, events)
    print(f"kcompat {sbroker.kind} {scenario}: {summary}; {time.monotonic() - t0:.1f} s")
