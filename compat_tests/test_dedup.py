"""Deduplication windows (docs/extensions.md, issue 15) with unmodified kafka-python,
confluent-kafka and Java kafka-clients 4.x producers against a real kcompat
broker process (one per module, admin port on, so ``/metrics`` is read) and
the session's 3-broker cluster at replication factor 3.

* the same ``kc-dedup-id`` from three producers inside ``kc.dedup.window.ms``
  is stored once — each producer gets success, the copies are holes no
  consumer sees; a copy after the window is stored again and opens a new
  window; the same id in another partition, and records without the header,
  are stored;
* ``kc.dedup.by=content``: the same key and value from several producers is
  stored once (other headers do not matter); a different key or value, a null
  key against an empty one, are stored;
* duplicates inside one batch (one flush, one stored batch): the first copy
  only, the batch keeps its offsets;
* ``kc.dedup.max.entries`` evicts the oldest id (let through afterwards,
  counted); IncrementalAlterConfigs switches dedup on and off;
* a kill -9 of the broker between the first copy and the others, and of
  partition leaders in the cluster (the duplicates sent to the new leaders,
  then once more after the old ones are back), let no duplicate through;
* transactions: the ids of an aborted transaction leave the window (live,
  and in the replay after a kill -9), a committed one's do not;
* bad input: ``kc.dedup.window.ms=-1`` / ``abc``, ``kc.dedup.by=foo``,
  ``kc.dedup.max.entries=0`` at CreateTopics and AlterConfigs (both kinds) are
  INVALID_CONFIG naming the key and value; an empty, null, over-long or
  repeated ``kc-dedup-id`` fails the whole batch with INVALID_RECORD and
  stores nothing;
* ``kcompat_dedup_duplicates_total{topic}`` counts exactly the dropped copies.

Each check compares exact (offset, value) lists per partition with what the
acknowledgements imply (``_dedup.read_stored``: the high watermarks equal the
acknowledged ends, nothing more is stored).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from ._broker import running
from ._dedup import (
    DEDUP_BY,
    DEDUP_ID,
    DUPLICATES,
    EVICTIONS,
    INVALID_RECORD,
    MAX_ENTRIES,
    WINDOW_MS,
    AdminBroker,
    JavaProducer,
    acked_offsets,
    read_stored,
    spec,
    values_at,
)
from ._delayed import Sent, Spec, now_ms, produce
from ._deployment import RF3_ONLY, Deployment
from ._records import TIMEOUT_S
from .confluent._helpers import admin_client, create_topic

pytestmark = pytest.mark.timeout(120)

#: the window of the expiry test: every copy of its first round must be
#: appended within it (the Java JVM is up before), and the test waits it out once.
#: Three client processes' sends took 4.6 s on a loaded 2-core CI host: 10 s
#: leaves room for twice that
WINDOW_SHORT_MS = 10_000
#: the window of the tests that never wait for an expiry
WINDOW_LONG_MS = 120_000
KP = "kafka-python"
CF = "confluent-kafka"
ACKS_ALL = {KP: {"acks": "all"}, CF: {"acks": "all"}}


@pytest.fixture(scope="module")
def dbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminBroker]:
    yield from running(AdminBroker(tmp_path_factory.mktemp("dedup-broker")))


@pytest.fixture(scope="module")
def java(dbroker: AdminBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JavaProducer]:
    """One Java KafkaProducer (idempotent, acks=all) for the module's broker;
    linger 100 ms, so what one ``send`` hands it for a partition is one batch;
    gzip, so a batch with holes is a compressed one rebuilt."""
    p = JavaProducer(dbroker.bootstrap, tmp_path_factory.mktemp("dedup-java"), "linger.ms=100",
                     "compression.type=gzip")
    try:
        yield p
    finally:
        p.close()


def _dedup_topic(bootstrap: str, topic: str, partitions: int, window_ms: int,
                 by: str | None = None, replication: int = 1) -> None:
    config = {WINDOW_MS: str(window_ms)}
    if by is not None:
        config[DEDUP_BY] = by
    create_topic(bootstrap, topic, partitions=partitions, replication=replication, config=config)


def _ends(*rounds: list[Sent]) -> dict[int, int]:
    """End offsets per partition the acknowledgements imply (holes included)."""
    ends: dict[int, int] = {}
    for sent in rounds:
        for s in sent:
            assert s.offset is not None, f"{s.spec.value!r} not acknowledged: {s.error}"
            ends[s.spec.partition] = max(ends.get(s.spec.partition, 0), s.offset + 1)
    return ends


def _stored(*rounds: list[Sent], dropped: set[bytes]) -> dict[int, list[tuple[int, bytes | None]]]:
    """(offset, value) per partition a consumer must see: every acknowledged
    record but the dropped copies (values are unique per test)."""
    out: dict[int, list[tuple[int, bytes | None]]] = {}
    for sent in rounds:
        for s in sent:
            assert s.offset is not None
            out.setdefault(s.spec.partition, [])
            if s.spec.value not in dropped:
                out[s.spec.partition].append((s.offset, s.spec.value))
    return {p: sorted(rows) for p, rows in out.items()}


def _assert_stored(bootstrap: str, topic: str, *rounds: list[Sent], dropped: set[bytes],
                   group: str | None = None) -> None:
    seen = read_stored(bootstrap, topic, _ends(*rounds), group)
    got = {p: values_at(rows) for p, rows in seen.items()}
    want = _stored(*rounds, dropped=dropped)
    assert got == want, (f"{topic}: a consumer sees {got}\nexpected {want}\n(dropped copies: "
                         f"{sorted(dropped)})")


# -- within the window / after it ------------------------------------------------------------


def test_same_id_from_three_producers_is_stored_once_per_window(
        dbroker: AdminBroker, java: JavaProducer, topic: str) -> None:
    """``order-1`` to partition 0 from kafka-python, then confluent-kafka, then
    Java, within the 10 s window (each with a record without the header): every
    send succeeds, the second and third copies are holes; ``order-1`` in
    partition 1 is stored too. After the window confluent-kafka's next copy is
    stored and opens a new window, so Java's copy right after it is dropped."""
    bs = dbroker.bootstrap
    _dedup_topic(bs, topic, 2, WINDOW_SHORT_MS)
    oid = b"order-1"
    first = produce(KP, bs, topic, [spec(0, b"kp-1", oid), spec(1, b"kp-1-p1", oid)])
    second = produce(CF, bs, topic, [spec(0, b"cf-1", oid), spec(0, b"cf-plain", key=b"k")])
    third = java.send(topic, [spec(0, b"java-1", oid), spec(0, b"java-plain", key=b"k")])
    assert acked_offsets(first, KP) == [0, 0]
    assert acked_offsets(second, CF) == [1, 2]
    assert acked_offsets(third, "Java") == [3, 4]
    late = max(s.acked_ms for s in third) - first[0].sent_ms
    assert late < WINDOW_SHORT_MS, (
        f"the third copy was acknowledged {late} ms after the first was sent: not inside the "
        f"{WINDOW_SHORT_MS} ms window (machine too slow for this test)")
    assert dbroker.metric(DUPLICATES, topic=topic) == 2

    # the window runs from the first stored copy, appended before kp's ack
    time.sleep(max(0.0, (first[0].acked_ms + WINDOW_SHORT_MS + 200 - now_ms()) / 1000))
    again = produce(CF, bs, topic, [spec(0, b"cf-2", oid)])
    again_java = java.send(topic, [spec(0, b"java-2", oid)])
    assert acked_offsets(again, CF) == [5]
    assert acked_offsets(again_java, "Java") == [6]
    _assert_stored(bs, topic, first, second, third, again, again_java,
                   dropped={b"cf-1", b"java-1", b"java-2"})
    assert dbroker.metric(DUPLICATES, topic=topic) == 3


def test_content_dedup_same_key_and_value_from_producers(
        dbroker: AdminBroker, java: JavaProducer, topic: str) -> None:
    """``kc.dedup.by=content``: kafka-python stores five distinct (key, value)
    pairs (a null key and an empty one differ); confluent-kafka and Java send
    some of them again (other headers, same key and value) — dropped — and new
    pairs — stored."""
    bs = dbroker.bootstrap
    _dedup_topic(bs, topic, 1, WINDOW_LONG_MS, by="content")
    first = produce(KP, bs, topic, [
        Spec(0, b"k1", b"v1", (), now_ms()), Spec(0, b"k1", b"v2", (), now_ms()),
        Spec(0, None, b"v1", (), now_ms()), Spec(0, b"", b"v1", (), now_ms()),
        Spec(0, b"k1", b"", (), now_ms())])
    second = produce(CF, bs, topic, [
        Spec(0, b"k1", b"v1", (("trace", b"cf"),), now_ms()), Spec(0, b"k2", b"v1", (), now_ms()),
        Spec(0, b"k1", b"v2", (), now_ms())])
    third = java.send(topic, [
        Spec(0, b"k1", b"v1", (), now_ms()), Spec(0, None, b"v1", (("trace", b"java"),), now_ms()),
        Spec(0, b"k2", b"v1", (), now_ms()), Spec(0, b"k3", b"v3", (), now_ms())])
    assert acked_offsets(first, KP) == [0, 1, 2, 3, 4]
    assert acked_offsets(second, CF) == [5, 6, 7]
    assert acked_offsets(third, "Java") == [8, 9, 10, 11]
    seen = read_stored(bs, topic, {0: 12})[0]
    got = [(s.offset, s.key, s.value, s.headers) for s in seen]
    assert got == [(0, b"k1", b"v1", ()), (1, b"k1", b"v2", ()), (2, None, b"v1", ()),
                   (3, b"", b"v1", ()), (4, b"k1", b"", ()), (6, b"k2", b"v1", ()),
                   (11, b"k3", b"v3", ())], f"{topic}: a consumer sees {got}"
    assert dbroker.metric(DUPLICATES, topic=topic) == 5


def test_duplicates_inside_one_batch(dbroker: AdminBroker, java: JavaProducer,
                                     topic: str) -> None:
    """Each client sends one compressed batch ``A B A C B A`` (ids; values
    unique) to its own partition (kafka-python lz4, confluent-kafka zstd, Java
    gzip): all six acknowledged at offsets 0-5, one stored batch per
    partition in its codec, and a consumer sees the first A, B and C only
    (offsets 0, 1, 3)."""
    bs = dbroker.bootstrap
    _dedup_topic(bs, topic, 3, WINDOW_LONG_MS)
    ids = [b"A", b"B", b"A", b"C", b"B", b"A"]

    def batch(p: int, tag: str) -> list[Spec]:
        return [spec(p, f"{tag}-{i}-{d.decode()}".encode(), d) for i, d in enumerate(ids)]

    sent = {KP: produce(KP, bs, topic, batch(0, "kp"), linger_ms=100, compression_type="lz4"),
            CF: produce(CF, bs, topic, batch(1, "cf"),
                        **{"linger.ms": 100, "compression.type": "zstd"}),
            "Java": java.send(topic, batch(2, "java"))}
    for who, s in sent.items():
        assert acked_offsets(s, who) == [0, 1, 2, 3, 4, 5]
    codecs = {p: dbroker.stored_codecs(topic, p) for p in range(3)}
    # one stored batch per partition (else a client split it: a test bug), with
    # the codec it was sent with (lz4 3, zstd 4, gzip 1), as Kafka's cleaner keeps it
    assert codecs == {0: [3], 1: [4], 2: [1]}, f"stored batches' codecs per partition {codecs}"
    dropped = {s.spec.value for rows in sent.values() for s in rows if s.offset in (2, 4, 5)}
    _assert_stored(bs, topic, *sent.values(), dropped=dropped)
    assert dbroker.metric(DUPLICATES, topic=topic) == 9


def test_max_entries_evicts_the_oldest_id(dbroker: AdminBroker, topic: str) -> None:
    """``kc.dedup.max.entries=2``: a batch of ids A B C evicts A, so A sent
    again is stored (and evicts B); C sent again is still a duplicate. The
    evictions and the duplicate are counted."""
    bs = dbroker.bootstrap
    create_topic(bs, topic, partitions=1, config={WINDOW_MS: str(WINDOW_LONG_MS),
                                                  MAX_ENTRIES: "2"})
    first = produce(KP, bs, topic, [spec(0, b"a", b"A"), spec(0, b"b", b"B"),
                                    spec(0, b"c", b"C")], linger_ms=100)
    a_again = produce(CF, bs, topic, [spec(0, b"a-again", b"A")])
    c_again = produce(CF, bs, topic, [spec(0, b"c-again", b"C")])
    assert acked_offsets([*first, *a_again, *c_again], "kafka-python + confluent-kafka") == [
        0, 1, 2, 3, 4]
    _assert_stored(bs, topic, first, a_again, c_again, dropped={b"c-again"})
    assert (dbroker.metric(DUPLICATES, topic=topic),
            dbroker.metric(EVICTIONS, topic=topic)) == (1, 2)


def test_dedup_switched_on_and_off_by_alter_configs(dbroker: AdminBroker, topic: str) -> None:
    """A plain topic stores X twice; IncrementalAlterConfigs sets
    ``kc.dedup.window.ms``: Z then Z again stores one, and X again is a
    duplicate too (the index is rebuilt from the log, which holds X, stored
    inside the window: ``ext/dedup.py``); deleting the key turns dedup off:
    Z is stored again."""
    bs = dbroker.bootstrap
    create_topic(bs, topic, partitions=1)
    admin = admin_client(bs)

    def alter(op: AlterConfigOpType, value: str | None) -> None:
        res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry(WINDOW_MS, value, incremental_operation=op)])
        admin.incremental_alter_configs([res], request_timeout=TIMEOUT_S)[res].result(TIMEOUT_S)

    off = produce(KP, bs, topic, [spec(0, b"x-1", b"X"), spec(0, b"x-2", b"X")])
    alter(AlterConfigOpType.SET, str(WINDOW_LONG_MS))
    on = [*produce(CF, bs, topic, [spec(0, b"z-1", b"Z")]),
          *produce(CF, bs, topic, [spec(0, b"z-2", b"Z")]),
          *produce(KP, bs, topic, [spec(0, b"x-3", b"X")])]
    alter(AlterConfigOpType.DELETE, None)
    off_again = produce(CF, bs, topic, [spec(0, b"z-3", b"Z")])
    assert acked_offsets([*off, *on, *off_again], "kafka-python + confluent-kafka") == [
        0, 1, 2, 3, 4, 5]
    _assert_stored(bs, topic, off, on, off_again, dropped={b"z-2", b"x-3"})


# -- kill -9 ----------------------------------------------------------------------------------


def test_kill9_between_copies_lets_no_duplicate_through(
        dbroker: AdminBroker, java: JavaProducer, topic: str) -> None:
    """kafka-python stores ``X``, confluent-kafka ``Y``; kill -9, restart;
    copies of X and Y from confluent-kafka, Java and kafka-python are all
    acknowledged and dropped, a new ``Z`` is stored. The counter of the new
    process counts the drops after the restart."""
    bs = dbroker.bootstrap
    _dedup_topic(bs, topic, 1, WINDOW_LONG_MS)
    before = [*produce(KP, bs, topic, [spec(0, b"x-first", b"X")]),
              *produce(CF, bs, topic, [spec(0, b"y-first", b"Y")])]
    assert acked_offsets(before, "kafka-python + confluent-kafka") == [0, 1]
    dbroker.kill()
    dbroker.restart()
    after = [*produce(CF, bs, topic, [spec(0, b"x-cf", b"X")]),
             *java.send(topic, [spec(0, b"x-java", b"X"), spec(0, b"y-java", b"Y")]),
             *produce(KP, bs, topic, [spec(0, b"z-kp", b"Z"), spec(0, b"x-kp", b"X")],
                      linger_ms=50)]
    assert acked_offsets(after, "after the restart") == [2, 3, 4, 5, 6]
    _assert_stored(bs, topic, before, after, dropped={b"x-cf", b"x-java", b"y-java", b"x-kp"})
    assert dbroker.metric(DUPLICATES, topic=topic) == 4


def _transaction(producer: Any, topic: str, specs: Sequence[Spec], commit: bool) -> list[int]:
    """One transaction of ``specs`` (partition 0), committed or aborted: the
    acknowledged offsets."""
    reports: list[Any] = []
    producer.begin_transaction()
    for sp in specs:
        producer.produce(topic, key=sp.key, value=sp.value, headers=list(sp.headers),
                         partition=sp.partition,
                         on_delivery=lambda err, msg: reports.append((err, msg)))
    assert producer.flush(TIMEOUT_S) == 0
    assert all(err is None for err, _m in reports), f"transactional sends failed: {reports}"
    (producer.commit_transaction if commit else producer.abort_transaction)(TIMEOUT_S)
    return [msg.offset() for _e, msg in reports]


def test_aborted_transaction_ids_leave_the_window(dbroker: AdminBroker, topic: str) -> None:
    """A transactional confluent-kafka producer: ``U`` aborted, then ``U``
    committed — stored; ``V`` committed; ``W`` aborted; kill -9 and restart;
    a new producer of the same transactional id commits ``W`` (stored: the
    replay forgets aborted ids too), ``V`` and ``U`` (duplicates). A
    read_committed consumer sees the three committed first copies."""
    from confluent_kafka import Producer

    bs = dbroker.bootstrap
    _dedup_topic(bs, topic, 1, WINDOW_LONG_MS)
    cfg = {"bootstrap.servers": bs, "transactional.id": f"dedup-{topic}", "linger.ms": 20}
    p = Producer(cfg)
    p.init_transactions(TIMEOUT_S)
    offsets = [*_transaction(p, topic, [spec(0, b"u-aborted", b"U")], commit=False),
               *_transaction(p, topic, [spec(0, b"u-after-abort", b"U")], commit=True),
               *_transaction(p, topic, [spec(0, b"v-committed", b"V")], commit=True),
               *_transaction(p, topic, [spec(0, b"w-aborted", b"W")], commit=False)]
    assert offsets == [0, 2, 4, 6], f"offsets {offsets} (each transaction ends with a marker)"
    del p
    dbroker.kill()
    dbroker.restart()
    p = Producer(cfg)
    p.init_transactions(TIMEOUT_S)
    after = _transaction(p, topic, [spec(0, b"w-after-restart", b"W"), spec(0, b"v-dup", b"V"),
                                    spec(0, b"u-dup", b"U")], commit=True)
    assert after == [8, 9, 10]
    seen = read_stored(bs, topic, {0: 12})[0]
    assert values_at(seen) == [(2, b"u-after-abort"), (4, b"v-committed"),
                               (8, b"w-after-restart")], f"read_committed sees {values_at(seen)}"
    assert dbroker.metric(DUPLICATES, topic=topic) == 2


# -- bad input ------------------------------------------------------------------------------------


def _config_error(future: Any) -> tuple[str, str]:
    """(error name, message) of a refused admin call (its confluent future)."""
    with pytest.raises(KafkaException) as ei:
        future.result(timeout=TIMEOUT_S)
    err = ei.value.args[0]
    return err.name(), err.str()


BAD_CONFIGS = [(WINDOW_MS, "-1"), (WINDOW_MS, "abc"), (DEDUP_BY, "foo"), (MAX_ENTRIES, "0")]


def test_bad_dedup_configs_are_invalid_config(dbroker: AdminBroker, topic: str) -> None:
    """CreateTopics with each bad value, and IncrementalAlterConfigs and (legacy)
    AlterConfigs of a dedup topic to it: INVALID_CONFIG, the message naming the
    key and the value; no topic created, configs unchanged."""
    from confluent_kafka.admin import NewTopic

    admin = admin_client(dbroker.bootstrap)
    for i, (key, value) in enumerate(BAD_CONFIGS):
        name = f"{topic}-bad-{i}"
        got = _config_error(admin.create_topics(
            [NewTopic(name, 1, 1, config={key: value})], request_timeout=TIMEOUT_S)[name])
        assert got[0] == "INVALID_CONFIG" and key in got[1] and value in got[1], (
            f"CreateTopics {key}={value}: {got}, expected INVALID_CONFIG naming {key} and {value}")
    names = set(admin.list_topics(timeout=TIMEOUT_S).topics)
    assert not {n for n in names if n.startswith(f"{topic}-bad-")}, f"refused topics exist: {names}"

    _dedup_topic(dbroker.bootstrap, topic, 1, 4000, by="header")
    for key, value in BAD_CONFIGS:
        inc = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
        got = _config_error(admin.incremental_alter_configs(
            [inc], request_timeout=TIMEOUT_S)[inc])
        assert got[0] == "INVALID_CONFIG" and key in got[1] and value in got[1], (
            f"IncrementalAlterConfigs {key}={value}: {got}, expected INVALID_CONFIG naming "
            f"{key} and {value}")
        legacy = ConfigResource(ResourceType.TOPIC, topic,
                                set_config={WINDOW_MS: "4000", DEDUP_BY: "header", key: value})
        got = _config_error(admin.alter_configs(
            [legacy], request_timeout=TIMEOUT_S)[legacy])
        assert got[0] == "INVALID_CONFIG" and key in got[1] and value in got[1], (
            f"AlterConfigs {key}={value}: {got}, expected INVALID_CONFIG naming {key} and {value}")
    res = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([res], request_timeout=TIMEOUT_S)[res].result(TIMEOUT_S)
    assert (entries[WINDOW_MS].value, entries[DEDUP_BY].value) == ("4000", "header")


def test_bad_dedup_id_fails_the_batch(dbroker: AdminBroker, topic: str) -> None:
    """A batch with a valid ``kc-dedup-id`` record and one whose id is empty,
    given twice, over 256 bytes (kafka-python) or null (confluent-kafka): every
    record of it fails with INVALID_RECORD (kafka-python shows the broker's
    message, which names the header) and nothing is stored — so the valid ids
    are not known afterwards: sent again, they are stored at offset 0."""
    from kafka.errors import InvalidRecordError

    bs = dbroker.bootstrap
    _dedup_topic(bs, topic, 4, WINDOW_LONG_MS)
    bad_kp = produce(KP, bs, topic, [
        spec(0, b"ok-0", b"id-0"), spec(0, b"empty", b""),
        spec(1, b"ok-1", b"id-1"), spec(1, b"twice", b"id-x", headers=((DEDUP_ID, b"id-y"),)),
        spec(3, b"ok-3", b"id-3"), spec(3, b"long", b"i" * 300),
    ], linger_ms=100)
    for s in bad_kp:
        assert isinstance(s.error, InvalidRecordError) and DEDUP_ID in str(s.error), (
            f"kafka-python: {s.spec.value!r} answered {s.error!r} at offset {s.offset}, "
            f"expected InvalidRecordError naming {DEDUP_ID}")
    bad_cf = produce(CF, bs, topic, [spec(2, b"ok-2", b"id-2"),
                                     Spec(2, b"k", b"null", ((DEDUP_ID, None),), now_ms())],  # type: ignore[arg-type]
                     **{"linger.ms": 100})
    for s in bad_cf:
        assert s.error is not None and s.error.code() == INVALID_RECORD, (
            f"confluent-kafka: {s.spec.value!r} answered {s.error} at offset {s.offset}, "
            f"expected INVALID_RECORD")
    good = produce(CF, bs, topic, [spec(p, f"ok-{p}-again".encode(), f"id-{p}".encode())
                                   for p in range(4)])
    assert acked_offsets(good, CF) == [0, 0, 0, 0]
    _assert_stored(bs, topic, good, dropped=set())
    assert dbroker.metric(DUPLICATES, topic=topic) == 0


# -- failover in the 3-broker cluster ------------------------------------------------------------


def _leaders_send(cluster: Any, topic: str, client: str, tag: str, ids: list[bytes],
                  extra: Sequence[Spec] = ()) -> list[Sent]:
    specs = [spec(p, f"{tag}-p{p}".encode(), oid) for p, oid in enumerate(ids)]
    return produce(client, cluster.live_bootstrap(), topic, [*specs, *extra], **ACKS_ALL[client])


def _coordinator(cluster: Any, group: str) -> int:
    """The broker coordinating ``group`` (FindCoordinator through DescribeGroups)."""
    admin = admin_client(cluster.live_bootstrap())
    desc = admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S)[group]
    return int(desc.result(timeout=TIMEOUT_S).coordinator.id)


def _wait_in_sync(cluster: Any, topic: str, partition: int, node: int,
                  timeout_s: float = 30.0) -> None:
    """Until ``node`` is in the partition's ISR again (it caught up after a restart)."""
    deadline = time.monotonic() + timeout_s
    isr: list[int] = []
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            md = admin_client(cluster.live_bootstrap()).list_topics(topic, timeout=5)
            isr = list(md.topics[topic].partitions[partition].isrs)
            if node in isr:
                return
        time.sleep(0.1)
    raise AssertionError(f"broker {node} not back in the ISR of {topic}-{partition}: {isr}")


@pytest.mark.parametrize("pbroker", RF3_ONLY, indirect=True)
def test_leader_kill9_lets_no_duplicate_through(pbroker: Deployment, topic: str) -> None:
    """Replication factor 3, three partitions (leaders spread): confluent-kafka
    stores ``order-p`` in each partition p. Twice, a partition leader is killed
    -9 and, once every partition has a live leader, kafka-python's copies to
    every partition (moved leaders and the others) are acknowledged and
    dropped, and the killed broker comes back:

    1. the leader of a partition that is neither the controller nor the
       coordinator of the reading group (the group reads and commits; some
       partitions are led elsewhere than its coordinator); new ids are stored
       beside the copies;
    2. once the first victim is back in the ISR, the new leader of the
       partition that moved — so it moves again, to the broker that was down
       while the copies of step 1 were dropped, or to the third one.

    After both restarts the copies are sent once more: still dropped."""
    cluster = pbroker.cluster
    assert cluster is not None
    n = 3
    ids = [f"order-{p}".encode() for p in range(n)]
    group = f"dedup-{topic}"
    _dedup_topic(cluster.bootstrap, topic, n, WINDOW_LONG_MS, replication=3)
    cluster.wait_for_leaders(topic, n)
    rounds = [_leaders_send(cluster, topic, CF, "first", ids)]
    assert acked_offsets(rounds[0], CF) == [0] * n
    dropped: set[bytes] = set()
    controller = cluster.wait_for_controller()
    coordinator = _coordinator(cluster, group)
    history = [f"controller {controller}, coordinator of the group {coordinator}"]
    moved, victims = -1, []
    for step in (1, 2):
        leaders = cluster.leaders(topic)
        if step == 1:
            victim = next((ldr for ldr in leaders.values() if ldr not in (controller, coordinator)),
                          next((ldr for ldr in leaders.values() if ldr != controller), leaders[0]))
            moved = min(p for p, ldr in leaders.items() if ldr == victim)
        else:
            _wait_in_sync(cluster, topic, moved, victims[-1])
            victim = leaders[moved]
        victims.append(victim)
        cluster.brokers[victim].kill()
        try:
            new_leaders = cluster.wait_for_leaders(topic, n, exclude=victim)
            fresh = [spec(p, f"fresh-{step}-p{p}".encode(), f"fresh-{step}-{p}".encode())
                     for p in range(n)] if step == 1 else []
            end = _ends(*rounds)
            dup = _leaders_send(cluster, topic, KP, f"dup-{step}", ids, fresh)
            assert acked_offsets(dup, KP) == [end[p] for p in range(n)] + [
                end[s.spec.partition] + 1 for s in dup[n:]]
            rounds.append(dup)
            dropped |= {f"dup-{step}-p{p}".encode() for p in range(n)}
            _assert_stored(cluster.live_bootstrap(), topic, *rounds, dropped=dropped,
                           group=group if step == 1 else None)
            if step == 1:
                coordinator = _coordinator(cluster, group)
                assert any(ldr != coordinator for ldr in new_leaders.values()), (
                    f"every partition is led by the group coordinator {coordinator}: "
                    f"{new_leaders} (test bug: no partition led elsewhere was checked)")
            history.append(f"killed {victim}: leaders {leaders} -> {new_leaders}")
        finally:
            cluster.brokers[victim].restart()
        cluster.wait_for_brokers()
    end = _ends(*rounds)
    rounds.append(_leaders_send(cluster, topic, CF, "dup-3", ids))
    assert acked_offsets(rounds[-1], CF) == [end[p] for p in range(n)]
    dropped |= {f"dup-3-p{p}".encode() for p in range(n)}
    _assert_stored(cluster.bootstrap, topic, *rounds, dropped=dropped)
    print("; ".join(history), f"; at the end: {cluster.leaders(topic)}")
