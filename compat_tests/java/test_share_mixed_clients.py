"""One share group (KIP-932), two client implementations at once: three Java
``KafkaShareConsumer`` (kafka-clients 4.4, one JVM: ``ShareMixed``) and two
confluent-kafka ``ShareConsumer`` processes (``compat_tests/_share_member.py
--policy modulo-limit``), with the group's dead-letter queue (KIP-1191).

A 2-partition topic gets ``RECORDS`` records (key ``k<i>``, value ``i``, partition
``i // 10 % 2``, 10-record batches) once all five members have a partition. Both
clients decide with the same function of (value, delivery count): ``i % 10 == 3``
RELEASE on the first delivery then ACCEPT, ``7`` REJECT, ``9`` RELEASE at every
delivery, else ACCEPT. The group has ``share.delivery.count.limit`` = 3,
``errors.deadletterqueue.topic.name`` = ``dlq.<topic>`` (created beforehand with
``errors.deadletterqueue.group.enable=true``) and
``errors.deadletterqueue.copy.record.enable=true``. Checked:

* every record was handed out exactly as the policy says, whichever client got it:
  a RELEASEd record comes back with its delivery count one higher; the ``9`` records
  are delivered 3 times and then never again; every acknowledgement was answered ok;
  both clients got records;
* the DLQ topic holds exactly the REJECTed records (delivery count 1) and the ``9``
  records (delivery count 3), each once, key and value copied, with the context
  headers ``__dlq.errors.topic`` / ``.partition`` / ``.offset`` / ``.group`` /
  ``.delivery.count`` / ``.message`` (read with a plain confluent ``Consumer``);
* afterwards ListShareGroupOffsets reports lag 0 on both partitions: every record is
  ACCEPTed or archived. (Not the start offset: Kafka 4.4 leaves it behind the last
  records archived at the delivery limit, e.g. 89 and 99 of 100, lag 0.)

Apache Kafka 4.4.0 (``kafka_reference``) writes these DLQ records as formatted:
``share.version`` 2 (the default of metadata version 4.4-IV0) is the first level
whose ``supportsShareGroupDLQ`` holds, and the broker's
``group.share.dlq.manager.class.name`` defaults to ``DefaultShareGroupDLQManager``.
The DLQ topic must exist (the broker's ``errors.deadletterqueue.auto.create.topics.enable``
defaults to false) and its name must start with the broker's
``errors.deadletterqueue.topic.name.prefix`` (default ``dlq.``). Besides the five
context headers Kafka writes ``__dlq.errors.message``: ``Offset rejected by client.``
for a REJECT, ``Offset delivery count exceeded the threshold.`` at the limit
(``DLQ_MESSAGES``); the checks require the same of kcompat, last.

kcompat runs as ``sbroker`` kind ``rf3`` (a 3-broker cluster, replication 3): the
partitions' leaders, the DLQ topic's leader and the group coordinator are spread
over the brokers (the run prints them, e.g. coordinator 2, topic leaders 1 and 2,
DLQ leader 3), so dead letters are written across brokers. This test stands in for
the rf3 variants of test_java_share's release-reject and test_share_groups'
test_accept_release_reject.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests._deployment import Deployment
from compat_tests._groups import TIMEOUT_S, create_topic, unique_group, wait_for
from compat_tests._share import (
    Delivery,
    Ledger,
    ShareMember,
    delivery_problems,
    require_share_apis,
    set_group_configs,
    stop_all,
)
from compat_tests.java.conftest import PKG, java_cmd
from compat_tests.java.kafka_reference import KafkaReference

pytestmark = pytest.mark.timeout(90)

RECORDS = 200
PARTITIONS = 2
BATCH = 10
JAVA_CONSUMERS = 3
PYTHON_MEMBERS = 2
DELIVERY_LIMIT = 3
#: after everything expected was seen, how long to watch for anything more
SETTLE_S = 1.0
RUN_TIMEOUT_S = 40.0
DLQ_HEADERS = {"__dlq.errors.topic", "__dlq.errors.partition", "__dlq.errors.offset",
               "__dlq.errors.group", "__dlq.errors.delivery.count", "__dlq.errors.message"}
#: ``__dlq.errors.message`` as Apache Kafka 4.4.0 writes it (kafka-server's
#: ``org.apache.kafka.server.share.dlq.ShareGroupDLQManager``), by the record's fate
DLQ_MESSAGES = {"X": "Offset rejected by client.",
                "R": "Offset delivery count exceeded the threshold."}
ACK_LETTER = {"ACCEPT": "A", "RELEASE": "R", "REJECT": "X"}


def where(i: int) -> tuple[int, int]:
    """(partition, offset) of record ``i``: batches of 10 alternate between the two."""
    return i // BATCH % PARTITIONS, i // (BATCH * PARTITIONS) * BATCH + i % BATCH


def expected(i: int) -> list[tuple[int, str]]:
    """(delivery count, decision) of every delivery of record ``i``, in order."""
    if i % 10 == 7:
        return [(1, "X")]
    if i % 10 == 9:
        return [(n, "R") for n in range(1, DELIVERY_LIMIT + 1)]
    if i % 10 == 3:
        return [(1, "R"), (2, "A")]
    return [(1, "A")]


def dead_letters() -> dict[int, int]:
    """Record -> the delivery count its DLQ record must carry."""
    return {i: expected(i)[-1][0] for i in range(RECORDS) if i % 10 in (7, 9)}


class JavaMembers:
    """The ``ShareMixed`` JVM: stdout to a file read while it runs; closing its stdin
    makes it close its consumers and list the group's start offsets."""

    def __init__(self, clients_cp: str, bootstrap: str, topic: str, group: str,
                 out: Path) -> None:
        self.out = out
        self.cmd = java_cmd(clients_cp, f"{PKG}.ShareMixed", bootstrap, topic, group,
                            str(JAVA_CONSUMERS), str(JAVA_CONSUMERS + PYTHON_MEMBERS),
                            str(int(RUN_TIMEOUT_S * 1000 + 20_000)))
        with open(out, "wb") as stdout, open(out.with_suffix(".stderr"), "wb") as stderr:
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=stdout,
                                         stderr=stderr)

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.out.read_text(errors="replace").splitlines():
            if line.startswith("{") and line.endswith("}"):
                out.append(json.loads(line))
        return out

    def deliveries(self) -> list[Delivery]:
        """Every ``delivered`` event as a ``Delivery``, settled by the acknowledgement
        callback that reported its offset (in acknowledgement order)."""
        rows: list[Delivery] = []
        unsettled: dict[tuple[int, int], list[Delivery]] = {}
        for e in self.events():
            if e["event"] == "delivered":
                d = Delivery(f"java-{e['consumer']}", e["ms"], e["partition"], e["offset"],
                             e["delivery_count"], ACK_LETTER[e["ack"]], e["key"], e["value"])
                rows.append(d)
                unsettled.setdefault((d.partition, d.offset), []).append(d)
            elif e["event"] == "ack_callback":
                for p, offsets in e["offsets"].items():
                    for o in offsets:
                        q = unsettled.get((int(p), o))
                        if q:
                            d = q.pop(0)
                            d.failed = e["error"] is not None
                            d.settled_ms = None if d.failed else e["ms"]
        return rows

    def stop(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def explain(self) -> str:
        err = self.out.with_suffix(".stderr").read_text(errors="replace")
        return (f"$ {' '.join(self.cmd)}\nexit {self.proc.poll()}\n--- stdout (tail) ---\n"
                f"{self.out.read_text(errors='replace')[-3000:]}\n--- stderr (tail) ---\n"
                f"{err[-3000:]}")


def setup(bootstrap: str, topic: str, dlq: str, group: str, replication: int) -> None:
    require_share_apis(bootstrap)
    create_topic(bootstrap, topic, PARTITIONS, replication)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(dlq, 1, replication, config={
        "errors.deadletterqueue.group.enable": "true"})])[dlq].result(TIMEOUT_S)
    set_group_configs(bootstrap, group, {
        "share.auto.offset.reset": "earliest",
        "share.delivery.count.limit": str(DELIVERY_LIMIT),
        "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.copy.record.enable": "true"})


def produce(bootstrap: str, topic: str) -> None:
    """Record i to ``where(i)``, flushed every ``BATCH`` records (one batch each)."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                  "linger.ms": 50})
    for i in range(RECORDS):
        p.produce(topic, key=f"k{i}".encode(), value=str(i).encode(), partition=where(i)[0])
        if (i + 1) % BATCH == 0:
            assert p.flush(TIMEOUT_S) == 0, f"records {i - BATCH + 1}..{i} not delivered"


def dlq_end(bootstrap: str, dlq: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_group("dlq-end")})
    try:
        return int(c.get_watermark_offsets(TopicPartition(dlq, 0), timeout=TIMEOUT_S)[1])
    finally:
        c.close()


def read_dlq(bootstrap: str, dlq: str) -> list[Any]:
    """Every record of the DLQ topic (up to its end offset), plain Consumer."""
    end = dlq_end(bootstrap, dlq)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_group("dlq-read"),
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition(dlq, 0, 0)])
    got: list[Any] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(got) < end and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg)
    finally:
        c.close()
    assert len(got) == end, f"read {len(got)} of the DLQ's {end} records"
    return got


def finished(ledger: Ledger) -> bool:
    """Every record's last expected delivery was settled at the broker."""
    settled = {(d.value, d.count, d.decision) for d in ledger.rows if d.settled_ms is not None}
    return all((str(i), *expected(i)[-1]) in settled for i in range(RECORDS))


@dataclass
class Outcome:
    group: str
    ledger: Ledger
    letters: list[Any]  # the DLQ topic's records
    offsets: dict[str, Any]  # ListShareGroupOffsets after the run: "p<n>" -> {start, lag}
    members: str  # the group's members and assignments when the records were produced
    coordinator: int | None  # the group coordinator's node id (DescribeShareGroups)
    errors: list[str]  # the confluent members' error notes


def run(bootstrap: str, topic: str, replication: int, workdir: Path,
        clients_cp: str) -> Outcome:
    dlq, group = f"dlq.{topic}", unique_group("share-mixed")
    setup(bootstrap, topic, dlq, group, replication)
    java = JavaMembers(clients_cp, bootstrap, topic, group, workdir / "java.out")
    members = [ShareMember(bootstrap, topic, group, workdir / f"py{n}.log", f"py-{n}",
                           "--policy", "modulo-limit", "--ack", ack)
               for n, ack in enumerate(("commit", "poll"))]

    def ledger() -> Ledger:
        led = Ledger(members)
        led.rows = sorted([*led.rows, *java.deliveries()], key=lambda d: d.ts_ms)
        return led

    def what() -> str:
        return "\n".join([java.explain(), *(m.describe() for m in members)])

    try:
        wait_for(lambda: any(e["event"] == "group_ready" for e in java.events()), 30.0, what)
        ready = next(e for e in java.events() if e["event"] == "group_ready")
        produce(bootstrap, topic)
        want_dlq = len(dead_letters())
        wait_for(lambda: finished(ledger()) and dlq_end(bootstrap, dlq) >= want_dlq,
                 RUN_TIMEOUT_S, lambda: f"dlq end {dlq_end(bootstrap, dlq)}\n{what()}",
                 interval=0.2)
        time.sleep(SETTLE_S)  # a redelivery or a late dead letter would come by now
    finally:
        stop_all(members)
        java.stop()
    events = java.events()
    failed = [e for e in events if e["event"] == "failed"
              or (e["event"] == "committed" and e["errors"])]
    assert not failed and java.proc.returncode == 0, f"{failed[:3]}\n{java.explain()}"
    offsets = next((e["offsets"] for e in events if e["event"] == "offsets"), None)
    assert offsets is not None, java.explain()
    errors = [n for m in members for n in m.notes() if "error" in n]
    return Outcome(group, ledger(), read_dlq(bootstrap, dlq), offsets,
                   json.dumps(ready["members"]), ready["coordinator"], errors)


def check(run: Outcome, topic: str) -> str:
    ledger, letters, offsets, group = run.ledger, run.letters, run.offsets, run.group
    assert not run.errors, run.errors
    by_value = ledger.by_value()
    problems = delivery_problems(ledger, RECORDS, expected, require_ok=True)
    for i in range(RECORDS):
        ds = by_value.get(str(i), [])
        if any((d.partition, d.offset, d.key) != (*where(i), f"k{i}") for d in ds):
            problems.append(f"record {i}: at {[(d.partition, d.offset, d.key) for d in ds]}")
    alien = sorted(set(by_value) - {str(i) for i in range(RECORDS)})
    assert not alien, f"records nobody produced: {alien[:5]}"
    assert not problems, (f"{len(problems)} records off (per member {ledger.per_member()}):\n"
                          + "\n".join(problems[:20]))
    per_member = ledger.per_member()
    assert any(m.startswith("java") for m in per_member) and any(
        m.startswith("py") for m in per_member), f"one client got nothing: {per_member}"
    want = dead_letters()
    got_letters: dict[int, dict[str, str]] = {}
    wrong_messages: list[str] = []
    for msg in letters:
        headers = {k: (v or b"").decode() for k, v in msg.headers() or ()}
        i = int(msg.value())
        assert i not in got_letters, f"record {i} twice in the DLQ: {headers}"
        assert msg.key() == f"k{i}".encode(), (msg.key(), msg.value())
        got_letters[i] = headers
    assert sorted(got_letters) == sorted(want), (
        f"DLQ holds {sorted(got_letters)}, expected {sorted(want)}")
    for i, headers in got_letters.items():
        partition, offset = where(i)
        assert set(headers) == DLQ_HEADERS, f"record {i}: headers {headers}"
        assert headers["__dlq.errors.topic"] == topic, headers
        assert (headers["__dlq.errors.partition"], headers["__dlq.errors.offset"]) == (
            str(partition), str(offset)), (i, headers)
        assert headers["__dlq.errors.delivery.count"] == str(want[i]), (i, headers)
        assert headers["__dlq.errors.group"] == group, (i, headers)
        if headers["__dlq.errors.message"] != DLQ_MESSAGES[expected(i)[-1][1]]:
            wrong_messages.append(f"{i}: {headers['__dlq.errors.message']!r}")
    lags = {p: (o or {}).get("lag") for p, o in offsets.items()}
    assert lags == {f"p{p}": 0 for p in range(PARTITIONS)}, (
        f"share-partition offsets after the run {offsets}: some record is left")
    assert not wrong_messages, (
        f"__dlq.errors.message of {len(wrong_messages)} dead letters is not Kafka's "
        f"{DLQ_MESSAGES} (everything else checked out): {wrong_messages[:4]}")
    releases_across = sum(
        1 for ds in by_value.values() for a, b in zip(ds, ds[1:], strict=False)
        if a.member[:2] != b.member[:2])
    return (f"deliveries per member {dict(sorted(per_member.items()))}, "
            f"{releases_across} redeliveries to the other client, "
            f"{len(letters)} dead letters, share-partition offsets {offsets}")


def leaders(bootstrap: str, *topics: str) -> dict[str, list[int]]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=TIMEOUT_S)
    return {t: [md.topics[t].partitions[p].leader for p in sorted(md.topics[t].partitions)]
            for t in topics}


def test_mixed_clients_on_reference_kafka(kafka_reference: KafkaReference, topic: str,
                                          tmp_path: Path, clients_cp: str) -> None:
    t0 = time.monotonic()
    outcome = run(kafka_reference.bootstrap, topic, 1, tmp_path, clients_cp)
    summary = check(outcome, topic)
    print(f"Apache Kafka {kafka_reference.version}: {summary}; members {outcome.members}; "
          f"{time.monotonic() - t0:.1f} s")


@pytest.mark.parametrize("sbroker", ["rf3"], indirect=True)
def test_mixed_clients_on_kcompat(sbroker: Deployment, topic: str, tmp_path: Path,
                                  clients_cp: str) -> None:
    t0 = time.monotonic()
    outcome = run(sbroker.bootstrap, topic, sbroker.replication, tmp_path, clients_cp)
    summary = check(outcome, topic)
    spread = leaders(sbroker.bootstrap, topic, f"dlq.{topic}")
    print(f"kcompat {sbroker.kind}: {summary}; coordinator {outcome.coordinator}, "
          f"leaders {spread}; members {outcome.members}; "
          f"{time.monotonic() - t0:.1f} s")
