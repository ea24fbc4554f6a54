"""Admin handlers called in-process at every advertised version: each response
must encode with kio and read back, and carry Kafka's error codes."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from kcompat.broker.config import broker_config
from kcompat.broker.handlers import HANDLERS
from kcompat.broker.host.broker import Broker
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.metadata import BrokerInfo
from kcompat.testing import running
from kcompat.wire import codec
from kcompat.wire import versions as v

E = ErrorCode


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    cfg = broker_config.load(None, {"log.dirs": str(tmp_path), "log.retention.ms": "1000"}, {})
    b = Broker(cfg)
    yield b
    b.close()


def call(broker: Broker, key: int, version: int, make: Callable[[ModuleType], Any]) -> Any:
    """Run the handler; encode the answer and read it back with kio."""
    request = make(codec.request_module(key, version))
    ctx = RequestContext(broker, key, version, 7, "test")
    response = running.run(broker, HANDLERS[key], ctx, request)
    raw = codec.encode_response(key, version, 7, response)
    header = 9 if codec.is_flexible(key, version) else 8  # size + cid (+ tags)
    decoded, _ = entity_reader(type(response))(raw, header)
    assert decoded == response
    return response


def versions(key: int) -> range:
    r = v.API_RANGES[key]
    return range(r.parse_min, r.max_version + 1)


def create(broker: Broker, name: str, partitions: int = 1, **configs: str) -> None:
    meta = running.run(broker, lambda: running.create_topic(broker, name, partitions, **configs))
    assert meta.name == name


# -- CreateTopics ------------------------------------------------------------

def _topic(m: ModuleType, name: str, partitions: int = 1, rf: int = 1,
           assignments: tuple[tuple[int, tuple[int, ...]], ...] = (),
           **configs: str | None) -> Any:
    return m.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=rf,
        assignments=tuple(m.CreatableReplicaAssignment(partition_index=i, broker_ids=b)
                          for i, b in assignments),
        configs=tuple(m.CreatableTopicConfig(name=k.replace("_", "."), value=val)
                      for k, val in configs.items()),
    )


@pytest.mark.parametrize("version", versions(v.CREATE_TOPICS))
def test_create_topics(broker: Broker, version: int) -> None:
    def make(m: ModuleType) -> Any:
        return m.CreateTopicsRequest(validate_only=False, topics=(
            _topic(m, "ok", 3, retention_ms="5000"),
            _topic(m, "dup"), _topic(m, "dup"),
            _topic(m, "badcfg", retention_ms="soon"),
            _topic(m, "nullcfg", segment_ms=None),
            _topic(m, "unknowncfg", no_such_key="1"),
            _topic(m, "zero", 0),
            _topic(m, "rf2", 1, 2),
            _topic(m, "manual", -1, -1, ((0, (1,)), (1, (1,)))),
            _topic(m, "manual-other", -1, -1, ((0, (2,)),)),
            _topic(m, "manual-twice", -1, -1, ((0, (1, 1)),)),
            _topic(m, "manual-gap", -1, -1, ((0, (1,)), (2, (1,)))),
            _topic(m, "manual-count", 2, -1, ((0, (1,)),)),
            _topic(m, "bad/name"),
        ))
    r = call(broker, v.CREATE_TOPICS, version, make)
    got = {t.name: t for t in r.topics}
    assert [t.name for t in r.topics].count("dup") == 1
    assert {n: t.error_code for n, t in got.items()} == {
        "ok": E.none, "dup": E.invalid_request, "badcfg": E.invalid_config,
        "nullcfg": E.invalid_config, "unknowncfg": E.invalid_config,
        "zero": E.invalid_partitions, "rf2": E.invalid_replication_factor, "manual": E.none,
        "manual-other": E.invalid_replica_assignment,
        "manual-twice": E.invalid_replica_assignment,
        "manual-gap": E.invalid_replica_assignment, "manual-count": E.invalid_request,
        "bad/name": E.invalid_topic_exception,
    }
    assert all(t.error_message for t in r.topics if t.error_code != E.none)
    assert broker.state.topics["ok"].partitions == 3 and broker.state.topics["manual"].partitions == 2
    assert broker.state.topics["ok"].configs == {"retention.ms": 5000}
    if version >= 5:
        ok = got["ok"]
        assert (ok.num_partitions, ok.replication_factor) == (3, 1)
        configs = {c.name: (c.value, c.config_source) for c in ok.configs}
        assert configs["retention.ms"] == ("5000", 1)
        assert configs["segment.bytes"] == ("1073741824", 5)
        assert got["badcfg"].num_partitions == -1 and got["badcfg"].configs == ()
    if version >= 7:
        assert got["ok"].topic_id == broker.state.topics["ok"].topic_id


def test_create_topics_validate_only_and_exists(broker: Broker) -> None:
    create(broker, "there")
    r = call(broker, v.CREATE_TOPICS, 7, lambda m: m.CreateTopicsRequest(
        validate_only=True, topics=(_topic(m, "new", 2), _topic(m, "there"))))
    assert [t.error_code for t in r.topics] == [E.none, E.topic_already_exists]
    assert r.topics[0].num_partitions == 2
    assert "new" not in broker.state.topics


# -- DeleteTopics ------------------------------------------------------------

@pytest.mark.parametrize("version", versions(v.DELETE_TOPICS))
def test_delete_topics_by_name(broker: Broker, version: int) -> None:
    create(broker, "a")
    tid = broker.state.topics["a"].topic_id

    def make(m: ModuleType) -> Any:
        if version >= 6:
            return m.DeleteTopicsRequest(timeout=0, topics=tuple(
                m.DeleteTopicState(name=n, topic_id=uuid.UUID(int=0)) for n in ("a", "nope")))
        return m.DeleteTopicsRequest(timeout=0, topic_names=("a", "nope"))
    r = call(broker, v.DELETE_TOPICS, version, make)
    assert [(t.name, t.error_code) for t in r.responses] == [
        ("a", E.none), ("nope", E.unknown_topic_or_partition)]
    assert "a" not in broker.state.topics
    if version >= 6:
        assert r.responses[0].topic_id == tid


def test_delete_topics_by_id(broker: Broker) -> None:
    create(broker, "b")
    tid = broker.state.topics["b"].topic_id
    unknown = uuid.uuid4()
    r = call(broker, v.DELETE_TOPICS, 6, lambda m: m.DeleteTopicsRequest(timeout=0, topics=(
        m.DeleteTopicState(name=None, topic_id=tid),
        m.DeleteTopicState(name=None, topic_id=unknown),
        m.DeleteTopicState(name="x", topic_id=uuid.uuid4()),
    )))
    assert [(t.name, t.error_code) for t in r.responses] == [
        ("b", E.none), (None, E.unknown_topic_id), ("x", E.invalid_request)]
    assert r.responses[1].topic_id == unknown
    assert "b" not in broker.state.topics


def test_delete_topics_duplicates(broker: Broker) -> None:
    create(broker, "c")
    r = call(broker, v.DELETE_TOPICS, 5,
             lambda m: m.DeleteTopicsRequest(timeout=0, topic_names=("c", "c")))
    assert [(t.name, t.error_code) for t in r.responses] == [("c", E.invalid_request)]
    assert "c" in broker.state.topics


# -- CreatePartitions ----------------------------------------------------------

@pytest.mark.parametrize("version", versions(v.CREATE_PARTITIONS))
def test_create_partitions(broker: Broker, version: int) -> None:
    for name in ("p", "q", "r", "s"):
        create(broker, name, 2)

    def make(m: ModuleType) -> Any:
        def t(name: str, count: int, assign: tuple[tuple[int, ...], ...] | None = None) -> Any:
            a = None if assign is None else tuple(
                m.CreatePartitionsAssignment(broker_ids=b) for b in assign)
            return m.CreatePartitionsTopic(name=name, count=count, assignments=a)
        return m.CreatePartitionsRequest(timeout=0, validate_only=False, topics=(
            t("p", 4), t("q", 1), t("r", 3, ((1,),)), t("s", 4, ((1,),)),
            t("nope", 3), t("dd", 3), t("dd", 4)))
    r = call(broker, v.CREATE_PARTITIONS, version, make)
    assert [(t.name, t.error_code) for t in r.results] == [
        ("p", E.none), ("q", E.invalid_partitions), ("r", E.none),
        ("s", E.invalid_replica_assignment), ("nope", E.unknown_topic_or_partition),
        ("dd", E.invalid_request)]
    assert broker.state.topics["p"].partitions == 4 and broker.state.topics["r"].partitions == 3
    assert broker.state.partition("p", 3) is not None


# -- DeleteRecords -----------------------------------------------------------

@pytest.mark.parametrize("version", versions(v.DELETE_RECORDS))
def test_delete_records(broker: Broker, version: int) -> None:
    create(broker, "d", 2)

    def make(m: ModuleType) -> Any:
        parts = tuple(m.DeleteRecordsPartition(partition_index=i, offset=o)
                      for i, o in ((0, 0), (1, -1), (5, 0)))
        bad = (m.DeleteRecordsPartition(partition_index=0, offset=10),)
        return m.DeleteRecordsRequest(timeout=0, topics=(
            m.DeleteRecordsTopic(name="d", partitions=parts),
            m.DeleteRecordsTopic(name="d", partitions=bad),
            m.DeleteRecordsTopic(name="nope", partitions=bad)))
    r = call(broker, v.DELETE_RECORDS, version, make)
    got = [[(p.partition_index, p.error_code, p.low_watermark) for p in t.partitions]
           for t in r.topics]
    assert got == [
        [(0, E.none, 0), (1, E.none, 0), (5, E.unknown_topic_or_partition, -1)],
        [(0, E.offset_out_of_range, 0)],
        [(0, E.unknown_topic_or_partition, -1)],
    ]


@pytest.mark.parametrize("topic", ["__kc_schedule", "__share_group_state"])
def test_delete_records_refuses_the_logs_that_prune_themselves(broker: Broker,
                                                              topic: str) -> None:
    """Their leader moves the log start past what no state needs; a prefix
    cut elsewhere would lose pending state on the replicas that rebuild."""
    create(broker, topic, 1)

    def make(m: ModuleType) -> Any:
        return m.DeleteRecordsRequest(timeout=0, topics=(m.DeleteRecordsTopic(
            name=topic, partitions=(m.DeleteRecordsPartition(partition_index=0, offset=-1),)),))
    r = call(broker, v.DELETE_RECORDS, 2, make)
    got = [(p.error_code, p.low_watermark) for t in r.topics for p in t.partitions]
    assert got == [(E.policy_violation, -1)]


# -- DescribeConfigs ---------------------------------------------------------

def _describe(m: ModuleType, resources: list[tuple[int, str, tuple[str, ...] | None]],
              synonyms: bool = True) -> Any:
    return codec.build(
        m.DescribeConfigsRequest, include_synonyms=synonyms, include_documentation=False,
        resources=tuple(m.DescribeConfigsResource(resource_type=t, resource_name=n,
                                                  configuration_keys=k)
                        for t, n, k in resources))


@pytest.mark.parametrize("version", versions(v.DESCRIBE_CONFIGS))
def test_describe_configs(broker: Broker, version: int) -> None:
    create(broker, "cfg", 1, **{"segment.ms": "100", "cleanup.policy": "compact,delete"})
    r = call(broker, v.DESCRIBE_CONFIGS, version, lambda m: _describe(m, [
        (2, "cfg", None), (2, "cfg", ("retention.ms", "segment.ms")), (2, "nope", None),
        (4, "1", None), (4, "", ("num.partitions",)), (4, "2", None), (4, "x", None),
        (3, "x", None)]))
    codes = [res.error_code for res in r.results]
    assert codes == [E.none, E.none, E.unknown_topic_or_partition, E.none, E.none,
                     E.invalid_request, E.invalid_request, E.invalid_request]
    topic = {c.name: c for c in r.results[0].configs}
    assert len(topic) == 37  # Kafka 4.4's keys, errors.deadletterqueue.group.enable included
    seg, ret, pol = topic["segment.ms"], topic["retention.ms"], topic["cleanup.policy"]
    assert (seg.value, seg.config_source, seg.read_only) == ("100", 1, False)
    assert (ret.value, ret.config_source) == ("1000", 4)
    assert pol.value == "compact,delete"
    # Kafka's log.roll.ms has no default: segment.ms lists its override only
    assert [(s.name, s.value, s.source) for s in seg.synonyms] == [("segment.ms", "100", 1)]
    assert [(s.name, s.source) for s in ret.synonyms] == [
        ("log.retention.ms", 4), ("log.retention.hours", 5)]
    assert [c.name for c in r.results[1].configs] == ["retention.ms", "segment.ms"]
    broker = {c.name: c for c in r.results[3].configs}
    assert broker["log.retention.ms"].config_source == 4
    assert broker["num.partitions"].config_source == 5
    assert len(broker) > 350  # Kafka 4.4's listed keys and kcompat's own
    assert broker["num.partitions"].read_only and not broker["log.retention.ms"].read_only
    assert broker["ssl.keystore.password"].is_sensitive
    assert broker["ssl.keystore.password"].value is None
    assert r.results[4].configs == ()  # "" lists the dynamic defaults only
    assert "Unexpected broker id" in r.results[5].error_message
    if version >= 3:
        assert (seg.config_type, pol.config_type, topic["preallocate"].config_type) == (5, 7, 1)
        assert broker["node.id"].config_type == 3


# -- AlterConfigs / IncrementalAlterConfigs ------------------------------------

@pytest.mark.parametrize("version", versions(v.ALTER_CONFIGS))
def test_alter_configs(broker: Broker, version: int) -> None:
    create(broker, "al", 1, **{"segment.ms": "100"})

    def make(m: ModuleType, validate: bool = False) -> Any:
        def res(t: int, n: str, **cfg: str | None) -> Any:
            return m.AlterConfigsResource(resource_type=t, resource_name=n, configs=tuple(
                m.AlterableConfig(name=k.replace("_", "."), value=x) for k, x in cfg.items()))
        return m.AlterConfigsRequest(validate_only=validate, resources=(
            res(2, "al", retention_ms="777"), res(2, "nope", retention_ms="1"),
            res(4, "1", log_retention_ms="1"), res(4, "", **{}), res(4, "9", x="1")))
    r = call(broker, v.ALTER_CONFIGS, version, make)
    # log.retention.ms is a dynamic broker key; an empty cluster default would drop
    # the cluster-level min.insync.replicas (INVALID_CONFIG, as Kafka 4 with ELR)
    assert [x.error_code for x in r.responses] == [
        E.none, E.unknown_topic_or_partition, E.none, E.invalid_config, E.invalid_request]
    assert broker.state.topics["al"].configs == {"retention.ms": 777}  # replaced, not merged
    bad = call(broker, v.ALTER_CONFIGS, version, lambda m: m.AlterConfigsRequest(
        validate_only=False, resources=(m.AlterConfigsResource(
            resource_type=2, resource_name="al",
            configs=(m.AlterableConfig(name="retention.ms", value="x"),)),)))
    assert bad.responses[0].error_code == E.invalid_config
    assert "retention.ms" in bad.responses[0].error_message


@pytest.mark.parametrize("version", versions(v.INCREMENTAL_ALTER_CONFIGS))
def test_incremental_alter_configs(broker: Broker, version: int) -> None:
    create(broker, "inc", 1, **{"segment.ms": "100", "retention.ms": "5"})

    def run(validate: bool, *ops: tuple[str, int, str | None], name: str = "inc") -> Any:
        def make(m: ModuleType) -> Any:
            cfgs = tuple(m.AlterableConfig(name=k, config_operation=o, value=x)
                         for k, o, x in ops)
            return m.IncrementalAlterConfigsRequest(validate_only=validate, resources=(
                m.AlterConfigsResource(resource_type=2, resource_name=name, configs=cfgs),))
        resp = call(broker, v.INCREMENTAL_ALTER_CONFIGS, version, make).responses[0]
        return resp.error_code

    assert run(True, ("segment.ms", 0, "200")) == E.none
    assert broker.state.topics["inc"].configs["segment.ms"] == 100
    assert run(False, ("segment.ms", 0, "200"), ("retention.ms", 1, None),
               ("cleanup.policy", 2, "compact")) == E.none
    assert broker.state.topics["inc"].configs == {"segment.ms": 200,
                                           "cleanup.policy": ["delete", "compact"]}
    assert run(False, ("cleanup.policy", 3, "delete")) == E.none
    assert broker.state.topics["inc"].configs["cleanup.policy"] == ["compact"]
    # APPEND to a non-list key: INVALID_CONFIG, as Kafka 4.4.0 answers (the fuzzer's finding)
    assert run(False, ("segment.ms", 2, "1")) == E.invalid_config
    # DELETE of a key the topic does not set, even an unknown one, changes nothing
    assert run(False, ("nope.key", 1, None)) == E.none
    assert broker.state.topics["inc"].configs["cleanup.policy"] == ["compact"]
    assert run(False, ("segment.ms", 0, None)) == E.invalid_request
    assert run(False, ("segment.ms", 0, "1"), ("segment.ms", 1, None)) == E.invalid_request
    assert run(False, ("segment.ms", 0, "-5")) == E.invalid_config
    assert run(False, ("nope.key", 0, "1")) == E.invalid_config
    # a topic that does not exist: its configs are checked first, as Kafka 4.4.0 does
    assert run(False, ("nope.key", 0, "1"), name="gone") == E.invalid_config
    assert run(True, ("segment.ms", 0, "-5"), name="gone") == E.invalid_config
    assert run(False, ("segment.ms", 0, "5"), name="gone") == E.unknown_topic_or_partition
    assert run(False, ("nope.key", 1, None), name="gone") == E.unknown_topic_or_partition
    assert run(False, ("segment.ms", 9, "1")) == E.invalid_request
    assert run(False, ("segment.ms", 0, "1"), name="nope") == E.unknown_topic_or_partition
    assert broker.state.topics["inc"].configs["segment.ms"] == 200


# -- DescribeCluster / FindCoordinator ------------------------------------------

@pytest.mark.parametrize("version", versions(v.DESCRIBE_CLUSTER))
def test_describe_cluster(broker: Broker, version: int) -> None:
    """v2 (KIP-1073) lists a fenced broker, marked, only when asked to."""
    image = broker.state.metadata.image
    image.brokers[2] = BrokerInfo(2, "127.0.0.2", 9093, None, "inc", fenced=True)

    def describe(fenced: bool) -> Any:
        return call(broker, v.DESCRIBE_CLUSTER, version, lambda m: codec.build(
            m.DescribeClusterRequest, include_cluster_authorized_operations=False,
            include_fenced_brokers=fenced))

    try:
        r = describe(False)
        assert (r.error_code, r.cluster_id, r.controller_id) == (
            E.none, broker.state.cluster_id, 1)
        assert [(b.broker_id, b.host, b.port) for b in r.brokers] == [(1, "127.0.0.1", 9092)]
        listed = [(b.broker_id, getattr(b, "is_fenced", None)) for b in describe(True).brokers]
        assert listed == ([(1, False), (2, True)] if version >= 2 else [(1, None)])
    finally:
        del image.brokers[2]


@pytest.mark.parametrize("version", versions(v.FIND_COORDINATOR))
def test_find_coordinator(broker: Broker, version: int) -> None:
    def make(m: ModuleType) -> Any:
        if version >= 4:
            return m.FindCoordinatorRequest(key_type=1, coordinator_keys=("a", "b"))
        if version >= 1:
            return m.FindCoordinatorRequest(key="g", key_type=0)
        return m.FindCoordinatorRequest(key="g")
    r = call(broker, v.FIND_COORDINATOR, version, make)
    if version >= 4:
        assert [(c.key, c.node_id, c.port, c.error_code) for c in r.coordinators] == [
            ("a", 1, 9092, E.none), ("b", 1, 9092, E.none)]
    else:
        assert (r.error_code, r.node_id, r.host, r.port) == (E.none, 1, "127.0.0.1", 9092)


def test_describe_cluster_controller_endpoint(broker: Broker) -> None:
    r = call(broker, v.DESCRIBE_CLUSTER, 1, lambda m: m.DescribeClusterRequest(
        include_cluster_authorized_operations=True, endpoint_type=2))
    # a combined node: its one listener is its controller endpoint too (KIP-919 tools)
    assert (r.error_code, r.endpoint_type, r.controller_id) == (E.none, 2, 1)
    assert [(b.broker_id, b.port) for b in r.brokers] == [(1, 9092)]
    r = call(broker, v.DESCRIBE_CLUSTER, 1, lambda m: m.DescribeClusterRequest(
        include_cluster_authorized_operations=True, endpoint_type=1))
    assert r.cluster_authorized_operations > 0


def test_find_coordinator_share_key_type(broker: Broker) -> None:
    r = call(broker, v.FIND_COORDINATOR, 6, lambda m: m.FindCoordinatorRequest(
        key_type=2, coordinator_keys=("g:t:0",)))
    assert [(c.error_code, c.node_id) for c in r.coordinators] == [(E.invalid_request, -1)]


# -- DescribeTopicPartitions ----------------------------------------------------

def _dtp(broker: Broker, names: tuple[str, ...], limit: int = 2000,
         cursor: tuple[str, int] | None = None) -> Any:
    def make(m: ModuleType) -> Any:
        return m.DescribeTopicPartitionsRequest(
            topics=tuple(m.TopicRequest(name=n) for n in names), response_partition_limit=limit,
            cursor=m.Cursor(topic_name=cursor[0], partition_index=cursor[1]) if cursor else None)
    return call(broker, v.DESCRIBE_TOPIC_PARTITIONS, 0, make)


def _pages(r: Any) -> tuple[list[tuple[str, list[int]]], tuple[str, int] | None]:
    c = r.next_cursor
    return ([(t.name, [p.partition_index for p in t.partitions]) for t in r.topics],
            (c.topic_name, c.partition_index) if c else None)


def test_describe_topic_partitions(broker: Broker) -> None:
    create(broker, "b", 2)
    create(broker, "src", 1)
    running.run(broker, lambda: running.create_topic(
        broker, "view", 1, **{"kc.view.of": "src", "kc.view.filter": "a = 'x'"}))
    r = _dtp(broker, ("view", "nope", "b", "b", "bad/name", "__consumer_offsets"))
    assert [(t.name, t.error_code, t.is_internal) for t in r.topics] == [
        ("__consumer_offsets", E.unknown_topic_or_partition, True),
        ("b", E.none, False), ("bad/name", E.invalid_topic_exception, False),
        ("nope", E.unknown_topic_or_partition, False), ("view", E.none, False)]
    assert r.next_cursor is None
    b = r.topics[1]
    assert b.topic_id == broker.state.topics["b"].topic_id
    assert b.topic_authorized_operations == r.topics[0].topic_authorized_operations > 0
    assert [(p.error_code, p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes,
             p.eligible_leader_replicas, p.last_known_elr, p.offline_replicas)
            for p in b.partitions] == [(E.none, i, 1, (1,), (1,), (), (), ()) for i in (0, 1)]
    assert [p.leader_id for p in r.topics[4].partitions] == [1]  # the view: its source's
    # an empty list: every topic, no errors
    assert _pages(_dtp(broker, ())) == ([("b", [0, 1]), ("src", [0]), ("view", [0])], None)


def test_describe_topic_partitions_pages(broker: Broker) -> None:
    create(broker, "a", 3)
    create(broker, "c", 2)
    # the limit cuts a topic: the cursor names its first partition left out
    assert _pages(_dtp(broker, ("c", "a"), limit=2)) == ([("a", [0, 1])], ("a", 2))
    # the limit runs out at a topic's end: the cursor is the next topic at 0
    assert _pages(_dtp(broker, ("c", "a"), limit=3)) == ([("a", [0, 1, 2])], ("c", 0))
    assert _pages(_dtp(broker, ("c", "a"), cursor=("a", 2), limit=2)) == (
        [("a", [2]), ("c", [0])], ("c", 1))
    # topics before the cursor's are skipped; unknown topics cost nothing
    assert _pages(_dtp(broker, ("a", "c", "b"), cursor=("b", 5))) == (
        [("b", []), ("c", [0, 1])], None)
    assert _pages(_dtp(broker, (), cursor=("a", 1), limit=0)) == ([("a", [1])], ("a", 2))
    # a cursor topic that was not asked for, or a negative index: INVALID_REQUEST
    for names, cursor in ((("a",), ("c", 0)), (("a", "a"), ("a", -1))):
        r = _dtp(broker, names, cursor=cursor)
        assert [(t.name, t.error_code, t.partitions) for t in r.topics] == [
            (n, E.invalid_request, ()) for n in names]
