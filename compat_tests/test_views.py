"""Filtered views (docs/extensions.md, issue 15) with unmodified kafka-python,
confluent-kafka and Java (kafka-clients 4.4) clients against a real kcompat
broker, on a single node and on the session's 3-broker cluster with
replication factor 3 (``gbroker``: groups form at once).

Per deployment one 3-partition source topic carries records with headers
``region`` (eu / us / apac, twice, null or missing), a numeric ``amount``
(also ``abc`` and missing) and ``kc-tag`` (a / b / c / missing), and three
views: ``region = 'eu' AND amount > 100``, ``TAGS IN ('a','b')``,
``region IS NULL`` (``_views.FILTERS``, with hand-written Python twins).

* each client, as one consumer of a consumer group subscribed to the source
  and the three views, reads of each view exactly the records its own read of
  the source gives when filtered client-side, per partition in source offset
  order; commits; more records are produced (lz4 batches); a new consumer of
  the same group reads exactly the new records of the source and the new
  matching ones of the views (it resumed at the committed offsets; Java and
  kafka-python commit the source's end offsets: their position got past the
  holes and empty batches a view ends with);
* Metadata lists each view with the source's partitions, leaders and replicas
  (also for a view created with replication factor 1 on rf3); CreateTopics
  answers the source's partition count; ListOffsets earliest / latest of each
  view partition are the source's;
* Produce to a view is refused with INVALID_TOPIC_EXCEPTION and stores nothing;
* bad views through both admin clients: INVALID_CONFIG naming the key (and the
  position of a syntax error), INVALID_PARTITIONS for a partition count other
  than the source's; none of them is created;
* deleting a view leaves its source and the other views; deleting the source
  deletes its remaining views;
* IncrementalAlterConfigs of ``kc.view.filter`` changes what a fresh consumer
  reads; a bad filter, or setting / removing ``kc.view.of``, is refused.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTP

from ._broker import unique_topic
from ._deployment import SINGLE_AND_RF3, Deployment
from ._records import TIMEOUT_S
from ._views import (
    ALTER_FROM,
    ALTER_TO,
    CLIENTS,
    FILTERS,
    INVALID_CONFIG,
    INVALID_PARTITIONS,
    INVALID_TOPIC_EXCEPTION,
    PARTITIONS,
    VIEW_FILTER,
    VIEW_OF,
    Produced,
    ViewFilter,
    assign_read,
    check_view,
    expected_count,
    group_read,
    produce,
    wait_until,
)

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.parametrize("gbroker", SINGLE_AND_RF3, indirect=True)]

#: records per partition of the module's first produce and of each client's second
FIRST_ROWS = 24
SECOND_ROWS = 12


@dataclass
class Views:
    dep: Deployment
    source: str
    views: list[str]  # aligned with FILTERS
    produced: list[Produced] = field(default_factory=list)
    #: CreateTopics' answer for each view kafka-python created: (num_partitions, error_code)
    created: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def bs(self) -> str:
        return self.dep.bootstrap

    def ends(self) -> dict[int, int]:
        return {p: 1 + max((r.offset for r in self.produced if r.partition == p), default=-1)
                for p in range(PARTITIONS)}


def kp_admin(bs: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=int(TIMEOUT_S * 1000))


def cf_admin(bs: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bs, "socket.timeout.ms": int(TIMEOUT_S * 1000)})


def view_configs(source: str, flt: str) -> dict[str, str]:
    return {VIEW_OF: source, VIEW_FILTER: flt}


def topic_names(admin: AdminClient) -> set[str]:
    return set(admin.list_topics(timeout=TIMEOUT_S).topics)


def wait_led(admin: AdminClient, name: str) -> None:
    def ready() -> bool:
        t = admin.list_topics(timeout=TIMEOUT_S).topics.get(name)
        return (t is not None and t.error is None and len(t.partitions) == PARTITIONS
                and all(p.leader >= 0 for p in t.partitions.values()))
    wait_until(ready, lambda: f"{name} never listed with {PARTITIONS} led partitions")


def cf_create(admin: AdminClient, name: str, partitions: int, replication: int,
              config: dict[str, str]) -> KafkaError | None:
    """confluent-kafka CreateTopics; the broker's error, or None."""
    fut = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                        replication_factor=replication, config=config)],
                              operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)[name]
    try:
        fut.result(timeout=TIMEOUT_S)
    except KafkaException as e:
        return e.args[0]
    return None


def kp_create(admin: KafkaAdminClient, name: str, partitions: int, replication: int,
              config: dict[str, str]) -> dict[str, Any]:
    """kafka-python CreateTopics; the topic's entry of the response."""
    res = admin.create_topics({name: {"num_partitions": partitions,
                                      "replication_factor": replication, "configs": config}},
                              raise_errors=False)
    (entry,) = res["topics"]
    return entry


@pytest.fixture(scope="module")
def views(gbroker: Deployment) -> Iterator[Views]:
    """The deployment's source topic with its three views, and the first records."""
    bs = gbroker.bootstrap
    v = Views(gbroker, unique_topic("views-src"),
              [unique_topic(f"view-{f.name}") for f in FILTERS])
    cf = cf_admin(bs)
    assert cf_create(cf, v.source, PARTITIONS, gbroker.replication, {}) is None
    wait_led(cf, v.source)
    kp = kp_admin(bs)
    try:
        # three ways: -1/-1 and 3/1 through kafka-python (the replication factor
        # is ignored), -1/-1 through confluent-kafka
        for name, flt, parts, rf in ((v.views[0], FILTERS[0], -1, -1),
                                     (v.views[1], FILTERS[1], PARTITIONS, 1)):
            entry = kp_create(kp, name, parts, rf, view_configs(v.source, flt.expression))
            v.created[name] = (entry.get("num_partitions", -1), entry["error_code"])
            assert entry["error_code"] == 0, f"kafka-python: create view {name}: {entry}"
    finally:
        kp.close()
    err = cf_create(cf, v.views[2], -1, -1, view_configs(v.source, FILTERS[2].expression))
    assert err is None, f"confluent-kafka: create view {v.views[2]}: {err}"
    for name in v.views:
        wait_led(cf, name)
    v.produced = produce(bs, v.source, "first", FIRST_ROWS, seed=1)
    for p in range(PARTITIONS):  # the premise: views cut holes into multi-record batches
        assert gbroker.stored_codecs(v.source, p) == [0, 0], (
            f"source partition {p}: batches {gbroker.stored_codecs(v.source, p)}, expected 2")
    yield v


@pytest.fixture(scope="module")
def java_cp() -> str:
    from .java._jvm import clients_classpath
    return clients_classpath()


# -- metadata, ListOffsets ---------------------------------------------------------------


def test_metadata_and_list_offsets(views: Views) -> None:
    """Metadata: each view has the source's partitions, leaders and replicas;
    CreateTopics answered the source's count. ListOffsets earliest / latest of
    every view partition equal the source's (kafka-python and librdkafka)."""
    for name, (parts, code) in views.created.items():
        assert (parts, code) == (PARTITIONS, 0), (
            f"CreateTopics of view {name}: num_partitions {parts}, error {code}; "
            f"expected the source's {PARTITIONS}")
    md = cf_admin(views.bs).list_topics(timeout=TIMEOUT_S).topics
    src = md[views.source]

    def layout(t: Any) -> dict[int, tuple[int, list[int]]]:
        return {p.id: (p.leader, list(p.replicas)) for p in t.partitions.values()}
    for name in views.views:
        assert name in md, f"Metadata does not list view {name}"
        assert layout(md[name]) == layout(src), (
            f"view {name}: (leader, replicas) by partition {layout(md[name])}, "
            f"source {layout(src)}")

    c = KafkaConsumer(bootstrap_servers=views.bs, enable_auto_commit=False)
    try:
        def offsets(topic: str) -> tuple[dict[int, int], dict[int, int]]:
            tps = [KTP(topic, p) for p in range(PARTITIONS)]
            return ({tp.partition: o for tp, o in c.beginning_offsets(tps).items()},
                    {tp.partition: o for tp, o in c.end_offsets(tps).items()})
        want = offsets(views.source)
        assert want == ({p: 0 for p in range(PARTITIONS)}, views.ends()), (
            f"source earliest/latest {want}, produced up to {views.ends()}")
        for name in views.views:
            assert offsets(name) == want, f"kafka-python ListOffsets of view {name}"
    finally:
        c.close()
    from confluent_kafka import Consumer, TopicPartition
    cc = Consumer({"bootstrap.servers": views.bs, "group.id": "unused"})
    try:
        for name in views.views:
            got = {p: cc.get_watermark_offsets(TopicPartition(name, p), timeout=TIMEOUT_S)
                   for p in range(PARTITIONS)}
            assert got == {p: (0, views.ends()[p]) for p in range(PARTITIONS)}, (
                f"confluent-kafka watermarks of view {name}: {got}")
    finally:
        cc.close()


# -- consumer groups ---------------------------------------------------------------------


def _check_committed(client: str, views: Views, phase: list[Produced],
                     committed: dict[str, int | None]) -> None:
    ends = views.ends()
    for p in range(PARTITIONS):
        got = committed.get(f"{views.source}:{p}")
        assert got == ends[p], f"{client}: committed offset of source partition {p}: {got}, end {ends[p]}"
        for name, flt in zip(views.views, FILTERS, strict=True):
            last = max((r.offset for r in phase if r.partition == p and flt.matches(r.headers)),
                       default=None)
            got = committed.get(f"{name}:{p}")
            if client == "confluent-kafka":
                # librdkafka commits last consumed + 1 (its position does not move
                # past trailing holes): anything from there to the end is right
                low = ends[p] if last is None else last + 1
                assert got is not None and low <= got <= ends[p], (
                    f"{client}: committed offset of view {name} partition {p}: {got}, "
                    f"expected {low}..{ends[p]}")
            else:
                assert got == ends[p], (
                    f"{client}: committed offset of view {name} partition {p}: {got}, expected "
                    f"the source's end {ends[p]} (the position gets past trailing holes)")


@pytest.mark.parametrize("client", CLIENTS)
def test_group_reads_views_and_resumes(views: Views, client: str,
                                       request: pytest.FixtureRequest) -> None:
    """One group member subscribed to the source and its views reads of each
    view exactly its client-side filter of the source, in offset order; commits;
    a new member of the group reads only what is produced afterwards."""
    cp = request.getfixturevalue("java_cp") if client == "java" else None
    group = f"views-{client}-{uuid.uuid4().hex[:8]}"
    topics = [views.source, *views.views]
    phase = list(views.produced)
    t0 = time.monotonic()
    first = group_read(client, views.bs, group, topics, expected_count(phase, FILTERS), cp)
    matched = [check_view(client, first.records, views.source, v, f, phase)
               for v, f in zip(views.views, FILTERS, strict=True)]
    assert all(0 < m < len(phase) for m in matched), f"test bug: matches {matched} of {len(phase)}"
    assert not first.timed_out, f"{client}: extra records arrived? {len(first.records)}"
    _check_committed(client, views, phase, first.committed)
    t1 = time.monotonic()

    new = produce(views.bs, views.source, f"{client}-second", SECOND_ROWS,
                  seed=10 + CLIENTS.index(client), compression="lz4")
    views.produced.extend(new)
    for p in range(PARTITIONS):
        assert views.dep.stored_codecs(views.source, p)[-2:] == [3, 3], "expected two lz4 batches"
    second = group_read(client, views.bs, group, topics, expected_count(new, FILTERS), cp)
    matched = [check_view(client, second.records, views.source, v, f, new)
               for v, f in zip(views.views, FILTERS, strict=True)]
    assert all(m > 0 for m in matched), f"test bug: matches {matched} of {len(new)}"
    assert not second.timed_out
    print(f"{views.dep.kind} {client}: first read {len(first.records)} records "
          f"({t1 - t0:.1f} s), resumed read {len(second.records)} ({time.monotonic() - t1:.1f} s)")


# -- writes refused ----------------------------------------------------------------------


def test_produce_to_view_refused(views: Views) -> None:
    """kafka-python and confluent-kafka producers get INVALID_TOPIC_EXCEPTION
    (kafka-python shows the broker's message: a read-only view); nothing is stored."""
    name = views.views[0]
    before = views.ends()
    p = KafkaProducer(bootstrap_servers=views.bs, retries=0, max_block_ms=int(TIMEOUT_S * 1000))
    try:
        fut = p.send(name, key=b"k", value=b"refused", partition=0, headers=[("region", b"eu")])
        with pytest.raises(Exception) as info:
            fut.get(timeout=TIMEOUT_S)
    finally:
        p.close()
    exc = info.value
    assert getattr(exc, "errno", None) == INVALID_TOPIC_EXCEPTION, (
        f"kafka-python: produce to view: {type(exc).__name__}: {exc}")
    assert "view" in str(exc), f"kafka-python: the error does not mention the view: {exc}"

    errors: list[KafkaError] = []
    cp = Producer({"bootstrap.servers": views.bs, "message.send.max.retries": 0})
    cp.produce(name, key=b"k", value=b"refused", partition=1,
               on_delivery=lambda err, msg: errors.append(err))
    assert cp.flush(TIMEOUT_S) == 0
    assert len(errors) == 1 and errors[0] is not None, f"confluent-kafka: delivery {errors}"
    assert errors[0].code() == KafkaError.TOPIC_EXCEPTION, (
        f"confluent-kafka: produce to view: {errors[0]}")

    c = KafkaConsumer(bootstrap_servers=views.bs, enable_auto_commit=False)
    try:
        for topic in (views.source, name):
            tps = [KTP(topic, q) for q in range(PARTITIONS)]
            ends = {tp.partition: o for tp, o in c.end_offsets(tps).items()}
            assert ends == before, f"{topic}: end offsets {ends} after the refused produce, {before} before"
    finally:
        c.close()


# -- bad input ---------------------------------------------------------------------------


def _bad_cases(views: Views) -> list[tuple[str, int, dict[str, str], int, list[str]]]:
    """(what, num_partitions, configs, error code, words the message must hold)."""
    src, ok = views.source, "region = 'eu'"
    missing = f"no-such-{uuid.uuid4().hex[:8]}"
    return [
        ("syntax error", -1, view_configs(src, "region = = 'eu'"), INVALID_CONFIG,
         [VIEW_FILTER, "position 9"]),
        ("unknown function", -1, view_configs(src, "upper(region) = 'EU'"), INVALID_CONFIG,
         [VIEW_FILTER, "upper"]),
        ("empty filter", -1, view_configs(src, ""), INVALID_CONFIG, [VIEW_FILTER]),
        ("filter missing", -1, {VIEW_OF: src}, INVALID_CONFIG, [VIEW_FILTER]),
        ("missing source", -1, view_configs(missing, ok), INVALID_CONFIG, [VIEW_OF, missing]),
        ("view of a view", -1, view_configs(views.views[0], ok), INVALID_CONFIG, [VIEW_OF]),
        ("internal source", -1, view_configs("__consumer_offsets", ok), INVALID_CONFIG, [VIEW_OF]),
        ("filter without kc.view.of", -1, {VIEW_FILTER: ok}, INVALID_CONFIG, [VIEW_OF]),
        ("another config key", -1, {**view_configs(src, ok), "retention.ms": "1000"},
         INVALID_CONFIG, ["retention.ms"]),
        ("partition count", 2, view_configs(src, ok), INVALID_PARTITIONS, ["2", str(PARTITIONS)]),
    ]


def test_bad_views_refused(views: Views) -> None:
    """Each bad view through kafka-python's and confluent-kafka's admin clients:
    the expected error code, a message naming the key; nothing created."""
    kp, cf = kp_admin(views.bs), cf_admin(views.bs)
    names: list[str] = []
    failures: list[str] = []
    # once it exists (the group tests made it), the refusal says why
    internal = ["internal"] if "__consumer_offsets" in topic_names(cf) else []
    try:
        for what, parts, config, code, words in _bad_cases(views):
            if what == "internal source":
                words = [*words, *internal]
            for client in ("kafka-python", "confluent-kafka"):
                name = unique_topic("bad-view")
                names.append(name)
                if client == "kafka-python":
                    entry = kp_create(kp, name, parts, -1, config)
                    got_code, msg = entry["error_code"], entry.get("error_message") or ""
                else:
                    err = cf_create(cf, name, parts, -1, config)
                    got_code, msg = (0, "") if err is None else (err.code(), err.str())
                lacking = [w for w in words if w not in msg]
                if got_code != code or lacking:
                    failures.append(f"{client} {what} {config} num_partitions={parts}: error "
                                    f"{got_code} {msg!r}; expected {code} naming {words}")
    finally:
        kp.close()
    created = topic_names(cf) & set(names)
    assert not failures, "\n".join(failures)
    assert not created, f"refused views exist anyway: {sorted(created)}"


# -- deletion ----------------------------------------------------------------------------


def test_delete_view_then_source(views: Views) -> None:
    """Deleting a view leaves its source and the other view readable; deleting
    the source deletes the remaining view."""
    bs = views.bs
    cf = cf_admin(bs)
    src = unique_topic("views-del-src")
    keep, drop = unique_topic("view-keep"), unique_topic("view-drop")
    assert cf_create(cf, src, PARTITIONS, views.dep.replication, {}) is None
    wait_led(cf, src)
    for name, flt in ((keep, FILTERS[2]), (drop, FILTERS[1])):
        err = cf_create(cf, name, -1, -1, view_configs(src, flt.expression))
        assert err is None, f"create view {name}: {err}"
        wait_led(cf, name)
    produced = produce(bs, src, "del", 6, seed=3)

    kp = kp_admin(bs)
    try:
        kp.delete_topics([drop])
        wait_until(lambda: drop not in topic_names(cf), lambda: f"deleted view {drop} still listed")
        left = topic_names(cf)
        assert {src, keep} <= left, f"deleting view {drop} took {sorted({src, keep} - left)} along"
        flt = FILTERS[2]
        want = expected_count(produced, [flt])
        got = assign_read(bs, [src, keep], want)
        check_view("confluent-kafka", got, src, keep, flt, produced)

        kp.delete_topics([src])
        wait_until(lambda: not ({src, keep} & topic_names(cf)),
                   lambda: f"after deleting source {src}: still listed "
                           f"{sorted({src, keep} & topic_names(cf))}")
    finally:
        kp.close()


# -- AlterConfigs ------------------------------------------------------------------------


def _alter(cf: AdminClient, name: str, key: str, value: str | None,
           op: AlterConfigOpType = AlterConfigOpType.SET) -> KafkaError | None:
    res = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op)])
    try:
        cf.incremental_alter_configs([res])[res].result(timeout=TIMEOUT_S)
    except KafkaException as e:
        return e.args[0]
    return None


def _config(cf: AdminClient, name: str, key: str) -> str | None:
    res = ConfigResource(ConfigResource.Type.TOPIC, name)
    entries = cf.describe_configs([res])[res].result(timeout=TIMEOUT_S)
    entry = entries.get(key)
    return None if entry is None else entry.value


def _read_matches(views: Views, name: str, flt: ViewFilter, timeout: float = TIMEOUT_S) -> None:
    produced = list(views.produced)
    want = expected_count(produced, [flt])
    got = assign_read(views.bs, [views.source, name], want, timeout)
    check_view("confluent-kafka", got, views.source, name, flt, produced)


def test_alter_view_filter(views: Views) -> None:
    """IncrementalAlterConfigs SET kc.view.filter: a fresh consumer reads what
    the new filter matches; a bad filter and any change of kc.view.of are
    INVALID_CONFIG and change nothing."""
    cf = cf_admin(views.bs)
    name = unique_topic("view-alter")
    err = cf_create(cf, name, -1, -1, view_configs(views.source, ALTER_FROM.expression))
    assert err is None, f"create view {name}: {err}"
    wait_led(cf, name)
    _read_matches(views, name, ALTER_FROM)

    assert _alter(cf, name, VIEW_FILTER, ALTER_TO.expression) is None
    wait_until(lambda: _config(cf, name, VIEW_FILTER) == ALTER_TO.expression,
               lambda: f"DescribeConfigs {VIEW_FILTER} of {name}: {_config(cf, name, VIEW_FILTER)!r}")
    deadline = time.monotonic() + 10
    while True:  # every broker applies the change from the metadata log, a moment apart
        try:
            _read_matches(views, name, ALTER_TO, timeout=3)
            break
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)

    refused = [
        ("bad filter", name, VIEW_FILTER, "amount >", AlterConfigOpType.SET, VIEW_FILTER),
        ("change kc.view.of", name, VIEW_OF, views.views[0], AlterConfigOpType.SET, VIEW_OF),
        ("remove kc.view.of", name, VIEW_OF, None, AlterConfigOpType.DELETE, VIEW_OF),
        ("set kc.view.of on a topic", views.source, VIEW_OF, views.views[1],
         AlterConfigOpType.SET, VIEW_OF),
    ]
    failures = []
    for what, target, key, value, op, word in refused:
        err = _alter(cf, target, key, value, op)
        if err is None or err.code() != INVALID_CONFIG or word not in err.str():
            failures.append(f"{what}: {err}; expected INVALID_CONFIG naming {word}")
    assert not failures, "\n".join(failures)
    assert _config(cf, name, VIEW_FILTER) == ALTER_TO.expression
    assert _config(cf, name, VIEW_OF) == views.source
    assert _config(cf, views.source, VIEW_OF) in (None, "")
    _read_matches(views, name, ALTER_TO)
