"""Share groups (KIP-932) with a real client: confluent-kafka's ShareConsumer
(librdkafka's share consumer, "Preview" in 2.16), every member its own process
(``compat_tests/_share_member.py``), against kcompat and Apache Kafka.

librdkafka 2.16 speaks ShareGroupHeartbeat v1, ShareFetch v1 and ShareAcknowledge
v1. In ``share.acknowledgement.mode=explicit`` an acknowledgement made with
``acknowledge()`` leaves on ``commit_sync()`` / ``commit_async()`` as a
ShareAcknowledge, or else rides on the next ``poll()``'s ShareFetch; ``close()``
sends the rest in the ShareAcknowledge that leaves the share session. ``Message``
carries the delivery count (``delivery_count()``).

- ACCEPT / RELEASE / REJECT: 2 members, 2 partitions, 200 records; one member
  acknowledges through ShareAcknowledge, the other on its next ShareFetch. Every
  record is settled once; a RELEASEd one comes back once with delivery count 2,
  a REJECTed one never. The same run against Apache Kafka
  (``KAFKA_REFERENCE_VERSION``, default 4.4.0) must give the same outcome.
- kcompat's FIFO message groups (``kc.share.ordering=message-group``): 100 groups
  of 10 records, 4 members releasing about 10 % of what they get, one of them
  killed -9 mid-run while it holds acquired records; per group the
  ACCEPTs are the produced sequence, no record is handed out before the one
  produced before it in its group was accepted, and nothing is lost.
- kcompat's redelivery backoff (``kc.share.redelivery.backoff.ms`` / ``.multiplier``):
  a record released 3 times comes back after 400, 800, 1600 ms at the earliest.

Apache Kafka reads a new share group from the latest offset unless
``share.auto.offset.reset=earliest`` is set before it reads; every run sets it.

kcompat runs as ``sbroker`` (conftest): a single node and the 3-broker cluster at
replication factor 3, both started with ``SHARE_BROKER_ARGS`` (locks of 1 s
allowed, as Kafka's ``group.share.min.record.lock.duration.ms`` is 15 s).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from ._deployment import SINGLE_AND_RF3, SINGLE_ONLY, Deployment
from ._groups import create_topic, unique_group, wait_for
from ._share import (
    Delivery,
    Ledger,
    ShareMember,
    fifo_violations,
    modulo_problems,
    produce,
    require_share_apis,
    run_modulo,
    set_group_configs,
    stop_all,
    wait_all_settled,
)
from .java._jvm import KAFKA_VERSION
from .java.kafka_reference import KafkaReference

pytestmark = pytest.mark.timeout(180)

EARLIEST = {"share.auto.offset.reset": "earliest"}
#: The reference broker assigns at the next heartbeat (5 s by default).
@pytest.mark.parametrize("sbroker", SINGLE_ONLY, indirect=True)  # rf3: test_share_mixed_clients
def test_accept_release_reject(sbroker: Deployment, topic: str, tmp_path: Path) -> None:
    ledger = run_modulo(sbroker.bootstrap, topic, unique_group("share"), tmp_path,
                        replication=sbroker.replication, configs=EARLIEST)
    problems = modulo_problems(ledger)
    assert not problems, (f"{len(problems)} records off (per member {ledger.per_member()}):\n"
                          + "\n".join(problems[:20]))


def test_accept_release_reject_reference(kafka_reference: KafkaReference, topic: str,
                                         tmp_path: Path) -> None:
    """Differential: Apache Kafka's outcome is the one ``modulo_problems`` expects
    of kcompat."""
    ledger = run_modulo(kafka_reference.bootstrap, topic, unique_group("share"), tmp_path,
                        replication=1, configs=EARLIEST)
    problems = modulo_problems(ledger)
    assert not problems, (f"Apache Kafka {KAFKA_VERSION}: {len(problems)} records off "
                          f"(per member {ledger.per_member()}):\n" + "\n".join(problems[:20]))


#: ``make test`` runs 100 groups of 10; the issue's full run (1,000 groups of 20):
#: SHARE_FIFO_GROUPS=1000 SHARE_FIFO_PER_GROUP=20 pytest compat_tests/test_share_groups.py -k fifo
FIFO_GROUPS = int(os.environ.get("SHARE_FIFO_GROUPS", "100"))
FIFO_PER_GROUP = int(os.environ.get("SHARE_FIFO_PER_GROUP", "10"))


def _fifo_records() -> list[tuple[int, str, str]]:
    """Message group g (the key) on partition g % 2, its records interleaved
    with the other groups' in produce order."""
    return [(g % 2, f"g{g:03d}", f"g{g:03d}.{j}")
            for j in range(FIFO_PER_GROUP) for g in range(FIFO_GROUPS)]


def _fifo_run(bootstrap: str, topic: str, group: str, workdir: Path,
              records: list[tuple[int, str, str]]) -> tuple[Ledger, list[Delivery]]:
    """The victim starts alone; once it has records, three more members start.
    All release about 10 % of what they get. The victim keeps the batch that
    takes it past 100 records acquired (``--stall-after 100``) and is killed -9
    at once, its locks still held. Returns every delivery of the run and the
    victim's unsettled ones."""
    victim = ShareMember(bootstrap, topic, group, workdir / "victim.log", "victim",
                         "--policy", "random", "--seed", "9", "--stall-after", "100")
    members: list[ShareMember] = []
    try:
        produce(bootstrap, topic, records)
        wait_for(lambda: victim.deliveries(), 30.0,
                 lambda: f"the victim never got a record: {victim.describe()}")
        members = [ShareMember(bootstrap, topic, group, workdir / f"m{i}.log", f"m{i}",
                               "--policy", "random", "--release-rate", "0.1", "--seed", str(i))
                   for i in range(3)]
        wait_for(lambda: any(n.startswith("# stalled") for n in victim.notes()), 30.0,
                 lambda: f"the victim never stalled: {victim.describe()}")
        victim.kill9()
        wait_all_settled([*members, victim], (v for _, _, v in records),
                         45.0 + len(records) / 500)
    finally:
        stop_all([*members, victim])
    return (Ledger([*members, victim]),
            [d for d in victim.deliveries() if d.settled_ms is None])


@pytest.mark.parametrize("sbroker", SINGLE_AND_RF3, indirect=True)
def test_fifo_message_groups(sbroker: Deployment, topic: str, tmp_path: Path) -> None:
    bootstrap, group = sbroker.bootstrap, unique_group("share-fifo")
    require_share_apis(bootstrap)
    create_topic(bootstrap, topic, 2, sbroker.replication)
    set_group_configs(bootstrap, group, {**EARLIEST, "kc.share.ordering": "message-group",
                                         "share.record.lock.duration.ms": "1500",
                                         "share.delivery.count.limit": "10"})
    records = _fifo_records()
    ledger, held = _fifo_run(bootstrap, topic, group, tmp_path, records)
    produced: dict[str, list[str]] = {}
    for _, key, value in records:
        produced.setdefault(key, []).append(value)
    problems = fifo_violations(ledger, produced)
    assert not problems, f"{len(problems)} FIFO violations:\n" + "\n".join(problems[:20])
    assert held, "the victim held no records when it was killed"
    comeback = {d.value: d for d in ledger.rows if d.member != "victim"}
    assert all(d.value in comeback and comeback[d.value].count > d.count for d in held), \
        f"records the victim held did not come back with a higher delivery count: {held[:5]}"
    releases = sum(1 for d in ledger.rows if d.decision == "R" and d.settled_ms is not None)
    assert releases > 0, f"no RELEASE was settled (per member {ledger.per_member()})"


BACKOFF_MS, BACKOFF_MULTIPLIER, RELEASES = 400, 2, 3
#: How late a redelivery may be: the member's poll cycle, a ShareFetch wait, a
#: loaded machine.
BACKOFF_LATENESS_MS = 1500


@pytest.mark.parametrize("sbroker", SINGLE_ONLY, indirect=True)
def test_redelivery_backoff(sbroker: Deployment, topic: str, tmp_path: Path) -> None:
    bootstrap, group = sbroker.bootstrap, unique_group("share-backoff")
    require_share_apis(bootstrap)
    create_topic(bootstrap, topic, 1, sbroker.replication)
    set_group_configs(bootstrap, group, {
        **EARLIEST, "kc.share.redelivery.backoff.ms": str(BACKOFF_MS),
        "kc.share.redelivery.backoff.multiplier": str(BACKOFF_MULTIPLIER),
        "kc.share.redelivery.backoff.max.ms": "10000"})
    member = ShareMember(bootstrap, topic, group, tmp_path / "m0.log", "m0", "--policy",
                         "release-n", "--release-key", "slow", "--release-times", str(RELEASES))
    try:
        produce(bootstrap, topic, [(0, "slow", "s0"), (0, "fast", "f1"), (0, "fast", "f2")])
        ledger = wait_all_settled([member], ["s0", "f1", "f2"], 30.0)
    finally:
        stop_all([member])
    slow = ledger.by_value()["s0"]
    assert [(d.count, d.decision) for d in slow] == [(1, "R"), (2, "R"), (3, "R"), (4, "A")], slow
    assert all(d.settled_ms is not None for d in slow), slow
    for n, (released, again) in enumerate(zip(slow, slow[1:], strict=False)):
        assert released.settled_ms is not None
        want_ms = BACKOFF_MS * BACKOFF_MULTIPLIER ** n
        gap_ms = again.ts_ms - released.settled_ms
        assert gap_ms >= want_ms, (f"release {n + 1} (delivery count {released.count}) came back "
                                   f"after {gap_ms} ms, before its backoff of {want_ms} ms")
        assert gap_ms <= want_ms + BACKOFF_LATENESS_MS, (
            f"release {n + 1} came back after {gap_ms} ms; backoff {want_ms} ms")
    fast = [d for v in ("f1", "f2") for d in ledger.by_value()[v]]
    assert [(d.count, d.decision) for d in fast] == [(1, "A"), (1, "A")], fast


def _read_all(bootstrap: str, topic: str, count: int, timeout_s: float) -> list[Any]:
    """The first ``count`` records of ``topic`` (all partitions), waiting up to
    ``timeout_s`` for them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_group("dlq-read"),
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg)
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("sbroker", SINGLE_AND_RF3, indirect=True)
def test_dead_letter_topic(sbroker: Deployment, topic: str, tmp_path: Path) -> None:
    """KIP-1191: REJECTed records and records released up to the delivery limit
    go to the group's DLQ topic (``errors.deadletterqueue.topic.name``, a topic
    with ``errors.deadletterqueue.group.enable=true``), copied with key, value and
    headers (``errors.deadletterqueue.copy.record.enable``) plus Kafka's
    ``__dlq.errors.*`` context headers; nothing else goes there."""
    bootstrap = sbroker.bootstrap
    require_share_apis(bootstrap)
    dlq = f"dlq.{topic}"
    create_topic(bootstrap, topic, 1, sbroker.replication)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(dlq, 1, sbroker.replication, config={
        "errors.deadletterqueue.group.enable": "true"})])[dlq].result(30)
    rejecting, poisoned = unique_group("share-dlq-rej"), unique_group("share-dlq-limit")
    for group in (rejecting, poisoned):
        set_group_configs(bootstrap, group, {
            **EARLIEST, "errors.deadletterqueue.topic.name": dlq,
            "errors.deadletterqueue.copy.record.enable": "true",
            "share.delivery.count.limit": "2"})
    produce(bootstrap, topic, [(0, f"k{i}", str(i)) for i in range(10)])
    members = [ShareMember(bootstrap, topic, rejecting, tmp_path / "rej.log", "rej",
                           "--policy", "modulo"),
               ShareMember(bootstrap, topic, poisoned, tmp_path / "lim.log", "lim",
                           "--policy", "release-n", "--release-key", "k5",
                           "--release-times", "99")]
    try:
        letters = _read_all(bootstrap, dlq, 2, 40.0)
        time.sleep(1.0)  # nothing more may come
        letters += _read_all(bootstrap, dlq, 3, 1.0)[2:]
    finally:
        stop_all(members)
    by_group = {}
    for msg in letters:
        headers = {k: (v or b"").decode() for k, v in msg.headers() or ()}
        by_group[headers["__dlq.errors.group"]] = (msg.key(), msg.value(), headers)
    assert sorted(by_group) == sorted([rejecting, poisoned]), letters
    key, value, headers = by_group[rejecting]
    assert (key, value) == (b"k7", b"7")
    assert headers["__dlq.errors.topic"] == topic
    assert headers["__dlq.errors.partition"] == "0"
    assert headers["__dlq.errors.offset"] == "7"
    assert headers["__dlq.errors.delivery.count"] == "1"
    key, value, headers = by_group[poisoned]
    assert (key, value) == (b"k5", b"5")
    assert headers["__dlq.errors.offset"] == "5"
    assert headers["__dlq.errors.delivery.count"] == "2"
    assert all(h.startswith("__dlq.errors.") for h in headers), headers


@pytest.mark.parametrize("sbroker", SINGLE_ONLY, indirect=True)
def test_delete_share_group(sbroker: Deployment, topic: str, tmp_path: Path) -> None:
    """DeleteGroups on a share group: NON_EMPTY_GROUP while a member is in it;
    once it is empty the group and its share-partition state go, so the same
    group id reads the topic again from ``share.auto.offset.reset``."""
    bootstrap, group = sbroker.bootstrap, unique_group("share-del")
    require_share_apis(bootstrap)
    create_topic(bootstrap, topic, 1, sbroker.replication)
    set_group_configs(bootstrap, group, EARLIEST)
    values = [str(i) for i in range(5)]
    produce(bootstrap, topic, [(0, None, v) for v in values])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    accept_all = ("--policy", "release-n", "--release-key", "none-such")
    member = ShareMember(bootstrap, topic, group, tmp_path / "m0.log", "m0", *accept_all)
    try:
        wait_all_settled([member], values, 30.0)
        with pytest.raises(KafkaException) as busy:
            admin.delete_consumer_groups([group])[group].result(30)
        assert busy.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    finally:
        stop_all([member])
    admin.delete_consumer_groups([group])[group].result(30)
    again = ShareMember(bootstrap, topic, group, tmp_path / "m1.log", "m1", *accept_all)
    try:
        ledger = wait_all_settled([again], values, 30.0)
    finally:
        stop_all([again])
    assert sorted(d.value for d in ledger.rows) == values  # each once more, from offset 0
    assert all(d.count == 1 for d in ledger.rows), ledger.rows


@pytest.mark.parametrize("sbroker", SINGLE_AND_RF3, indirect=True)
def test_isolation_levels(sbroker: Deployment, topic: str, tmp_path: Path) -> None:
    """``share.isolation.level``: a read_committed share group never gets a
    record of an aborted transaction (nor one of an open transaction), a
    read_uncommitted one gets them all — one transactional producer commits,
    aborts, commits."""
    bootstrap = sbroker.bootstrap
    require_share_apis(bootstrap)
    create_topic(bootstrap, topic, 1, sbroker.replication)
    committed_group, everything = unique_group("share-rc"), unique_group("share-ru")
    set_group_configs(bootstrap, committed_group, {**EARLIEST,
                                                   "share.isolation.level": "read_committed"})
    set_group_configs(bootstrap, everything, EARLIEST)
    producer = Producer({"bootstrap.servers": bootstrap,
                         "transactional.id": unique_group("share-txn")})
    producer.init_transactions(30)
    sent: dict[str, bool] = {}
    for txn, commit in enumerate((True, False, True)):
        producer.begin_transaction()
        for i in range(3):
            value = f"t{txn}-{i}"
            producer.produce(topic, value=value.encode(), partition=0)
            sent[value] = commit
        assert producer.flush(30) == 0  # stored before the abort (else librdkafka purges)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    accept_all = ("--policy", "release-n", "--release-key", "none-such")
    members = [ShareMember(bootstrap, topic, committed_group, tmp_path / "rc.log", "rc",
                           *accept_all),
               ShareMember(bootstrap, topic, everything, tmp_path / "ru.log", "ru",
                           *accept_all)]
    try:
        wait_for(lambda: len(Ledger(members).rows) >= len(sent) + 6, 30.0,
                 lambda: f"deliveries so far: {Ledger(members).rows}")
        time.sleep(1.0)  # an aborted record would come by now
        ledger = Ledger(members)
    finally:
        stop_all(members)
    got = {name: sorted(d.value for d in ledger.rows if d.member == name)
           for name in ("rc", "ru")}
    assert got["rc"] == sorted(v for v, ok in sent.items() if ok)
    assert got["ru"] == sorted(sent)


@pytest.mark.parametrize("sbroker", SINGLE_AND_RF3, indirect=True)
def test_share_group_reads_a_filtered_view(sbroker: Deployment, topic: str,
                                           tmp_path: Path) -> None:
    """A share group on a filtered view (``kc.view.of``) is handed exactly the
    matching records, once each, at their source offsets; the records the
    filter takes out are gaps the group never sees (released and accepted
    records come back and settle as on a topic)."""
    bootstrap = sbroker.bootstrap
    require_share_apis(bootstrap)
    create_topic(bootstrap, topic, 2, sbroker.replication)
    view, group = f"{topic}-eu", unique_group("share-view")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(view, -1, -1, config={
            "kc.view.of": topic, "kc.view.filter": "region = 'eu'"})]).values():
        future.result(30)
    set_group_configs(bootstrap, group, EARLIEST)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    acked: dict[str, tuple[int, int]] = {}

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        acked[msg.value().decode()] = (msg.partition(), msg.offset())

    for i in range(60):  # batches of both partitions mix eu with others
        region = [b"eu", b"us", b"apac"][i % 3] if i % 7 else None
        producer.produce(topic, key=b"k%d" % i, value=b"%d" % i, partition=i % 2,
                         headers=[("region", region)] if region else [], on_delivery=on_delivery)
    assert producer.flush(30) == 0
    expected = {v: at for v, at in acked.items()
                if int(v) % 3 == 0 and int(v) % 7}  # value i: eu unless i % 7 == 0
    # value%3 == 0 released once ("release-n" on key k0) then accepted, the rest accepted
    member = ShareMember(bootstrap, view, group, tmp_path / "view.log", "v",
                         "--policy", "release-n", "--release-key", "k3", "--release-times", "1")
    try:
        wait_for(lambda: len([d for d in member.deliveries() if d.decision == "A"])
                 >= len(expected), 30.0, lambda: f"deliveries: {member.deliveries()}")
        time.sleep(0.5)  # anything else would come by now
        rows = member.deliveries()
    finally:
        stop_all([member])
    accepted = {d.value: (d.partition, d.offset) for d in rows if d.decision == "A"}
    assert accepted == expected
    assert sorted(d.value for d in rows) == sorted([*expected, "3"])  # k3 twice
    assert [d.count for d in rows if d.value == "3"] == [1, 2]
