"""The admin surface Kafka's tools expect (issue 18 item 5), in-process at every
advertised version: DescribeLogDirs, ElectLeaders, DescribeQuorum,
ListConfigResources, Describe/AlterClientQuotas. Each answer must encode with
kio and read back (``call``); client quotas must survive a restart, also from a
metadata checkpoint. The wire behaviour against Apache Kafka 4.4 is in
compat_tests/java/test_admin_surface_differential.py."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from kcompat.broker.config import broker_config
from kcompat.broker.controller import client_quotas as cq
from kcompat.broker.host.broker import Broker
from kcompat.testing import running
from kcompat.wire import batch as wbatch
from kcompat.wire import versions as v
from kcompat.wire.records import encode_batch
from tests.unit.broker.test_admin_handlers import call, create, versions

E = ErrorCode


def _broker(path: Path, **extra: str) -> Broker:
    return Broker(broker_config.load(None, {"log.dirs": str(path), **extra}, {}))


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = _broker(tmp_path)
    yield b
    b.close()


async def _produce(broker: Broker, topic: str, index: int, values: list[bytes]) -> None:
    """Append one batch through the partition's Raft group and wait for its commit."""
    group = broker.cluster.group_of(topic, index)
    assert group is not None
    now = 1_700_000_000_000
    view = memoryview(encode_batch([(None, x, (), now) for x in values])).toreadonly()
    written = broker.cluster.propose_batch(group, view, wbatch.parse_header(view), now)
    code = await broker.cluster.wait_committed(group, written.base_offset,
                                               written.partition_leader_epoch,
                                               trio.current_time() + 5)
    assert code == E.none


# -- DescribeLogDirs --------------------------------------------------------------------

@pytest.mark.parametrize("version", versions(v.DESCRIBE_LOG_DIRS))
def test_describe_log_dirs(broker: Broker, version: int) -> None:
    create(broker, "ld", 2)
    running.run(broker, _produce, broker, "ld", 0, [b"x" * 100] * 3)

    def make(topics: Any) -> Any:
        return lambda m: m.DescribeLogDirsRequest(topics=topics(m))

    r = call(broker, v.DESCRIBE_LOG_DIRS, version, make(lambda m: None))
    [result] = r.results
    assert result.log_dir == str(broker.state.data_dir.resolve())
    sizes = {(t.name, p.partition_index): (p.partition_size, p.offset_lag, p.is_future_key)
             for t in result.topics for p in t.partitions}
    assert sizes[("ld", 0)][0] > 300 and sizes[("ld", 1)] == (0, 0, False)
    assert sizes[("ld", 0)][1:] == (0, False)
    if version >= 4:
        assert result.total_bytes >= result.usable_bytes > 0
    r = call(broker, v.DESCRIBE_LOG_DIRS, version, make(lambda m: (
        m.DescribableLogDirTopic(topic="ld", partitions=(1, 7)),
        m.DescribableLogDirTopic(topic="nope", partitions=(0,)))))
    assert [(t.name, [p.partition_index for p in t.partitions])
            for t in r.results[0].topics] == [("ld", [1])]


# -- ElectLeaders -----------------------------------------------------------------------

def _elect(m: ModuleType, version: int, kind: int,
           tps: tuple[tuple[str, tuple[int, ...]], ...] | None) -> Any:
    fields: dict[str, Any] = {"timeout": datetime.timedelta(seconds=2)}
    if version >= 1:
        fields["election_type"] = kind
    parts = None if tps is None else tuple(
        m.TopicPartitions(topic=t, partitions=ps) for t, ps in tps)
    return m.ElectLeadersRequest(topic_partitions=parts, **fields)


@pytest.mark.parametrize("version", versions(v.ELECT_LEADERS))
def test_elect_leaders_single_node(broker: Broker, version: int) -> None:
    """A lone replica always is its preferred leader; unknown names as Kafka."""
    create(broker, "el", 2)
    r = call(broker, v.ELECT_LEADERS, version, lambda m: _elect(
        m, version, 0, (("el", (0, 5)), ("nope", (0,)))))
    got = {(t.topic, p.partition_id): (p.error_code, p.error_message)
           for t in r.replica_election_results for p in t.partition_result}
    assert got == {
        ("el", 0): (E.election_not_needed, "Leader election not needed for topic partition."),
        ("el", 5): (E.unknown_topic_or_partition, "No such partition as el-5"),
        ("nope", 0): (E.unknown_topic_or_partition, "No such topic as nope"),
    }
    r = call(broker, v.ELECT_LEADERS, version, lambda m: _elect(m, version, 0, None))
    # every topic listed, partitions whose election was not needed left out
    assert {t.topic: t.partition_result for t in r.replica_election_results}["el"] == ()
    if version >= 1:
        r = call(broker, v.ELECT_LEADERS, version, lambda m: _elect(m, version, 1,
                                                                     (("el", (1,)),)))
        assert r.replica_election_results[0].partition_result[0].error_code == (
            E.election_not_needed)
        r = call(broker, v.ELECT_LEADERS, version, lambda m: _elect(m, version, 5,
                                                                     (("el", (1,)),)))
        assert r.error_code == E.invalid_request
        assert r.replica_election_results[0].partition_result[0].error_message == (
            "Unknown election type 5")


# -- DescribeQuorum ---------------------------------------------------------------------

@pytest.mark.parametrize("version", versions(v.DESCRIBE_QUORUM))
def test_describe_quorum(broker: Broker, version: int) -> None:
    def make(m: ModuleType) -> Any:
        return m.DescribeQuorumRequest(topics=(
            m.TopicData(topic_name="__cluster_metadata", partitions=(
                m.PartitionData(partition_index=0),)),
            m.TopicData(topic_name="other", partitions=(m.PartitionData(partition_index=0),))))

    r = running.run(broker, _in_service, broker, version, make)
    meta, other = r.topics
    [p] = meta.partitions
    assert (p.error_code, p.leader_id) == (E.none, 1) and p.leader_epoch >= 1
    assert p.high_watermark > 0 and p.observers == ()
    [voter] = p.current_voters
    assert (voter.replica_id, voter.log_end_offset) == (1, p.high_watermark)
    if version >= 1:
        assert voter.last_fetch_timestamp > 0 and voter.last_caught_up_timestamp > 0
    if version >= 2:
        assert [(n.node_id, n.listeners[0].port) for n in r.nodes] == [(1, 9092)]
    assert other.partitions[0].error_code == E.unknown_topic_or_partition


async def _in_service(broker: Broker, version: int, make: Any) -> Any:
    """Call a handler while the broker runs (the metadata group elected)."""
    from kcompat.broker.handlers import HANDLERS
    from kcompat.broker.host.context import RequestContext
    from kcompat.wire import codec

    request = make(codec.request_module(v.DESCRIBE_QUORUM, version))
    ctx = RequestContext(broker, v.DESCRIBE_QUORUM, version, 7, "test")
    response = await HANDLERS[v.DESCRIBE_QUORUM](ctx, request)
    raw = codec.encode_response(v.DESCRIBE_QUORUM, version, 7, response)
    header = 9 if codec.is_flexible(v.DESCRIBE_QUORUM, version) else 8
    assert entity_reader(type(response))(raw, header)[0] == response
    return response


# -- ListConfigResources ----------------------------------------------------------------

@pytest.mark.parametrize("version", versions(v.LIST_CONFIG_RESOURCES))
def test_list_config_resources(broker: Broker, version: int) -> None:
    create(broker, "lcr")
    if version == 0:
        r = call(broker, v.LIST_CONFIG_RESOURCES, 0, lambda m: m.ListConfigResourcesRequest())
        assert (r.error_code, r.config_resources) == (E.none, ())
        return

    def listed(*types: int) -> Any:
        return call(broker, v.LIST_CONFIG_RESOURCES, version,
                    lambda m: m.ListConfigResourcesRequest(resource_types=types))

    r = listed()
    assert [(c.resource_type, c.resource_name) for c in r.config_resources][:3] == [
        (8, "1"), (4, "1"), (2, "lcr")]
    assert [c.resource_name for c in listed(2).config_resources] == ["lcr"]
    assert listed(16, 32).config_resources == ()
    assert listed(1).error_code == E.unsupported_version


# -- client quotas ----------------------------------------------------------------------

def _alter(broker: Broker, version: int, entries: list[tuple[list[tuple[str, str | None]],
                                                             list[tuple[str, float | None]]]],
           validate_only: bool = False) -> list[tuple[Any, ...]]:
    def make(m: ModuleType) -> Any:
        return m.AlterClientQuotasRequest(validate_only=validate_only, entries=tuple(
            m.EntryData(entity=tuple(m.EntityData(entity_type=t, entity_name=n) for t, n in ent),
                        ops=tuple(m.OpData(key=k, value=val or 0.0, remove=val is None)
                                  for k, val in ops))
            for ent, ops in entries))
    r = call(broker, v.ALTER_CLIENT_QUOTAS, version, make)
    return [(e.error_code, e.error_message, tuple((x.entity_type, x.entity_name)
                                                  for x in e.entity)) for e in r.entries]


def _describe(broker: Broker, version: int, components: tuple[tuple[str, int, str | None], ...],
              strict: bool = False) -> Any:
    return call(broker, v.DESCRIBE_CLIENT_QUOTAS, version,
                lambda m: m.DescribeClientQuotasRequest(strict=strict, components=tuple(
                    m.ComponentData(entity_type=t, match_type=k, match=s)
                    for t, k, s in components)))


def _found(r: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    return {tuple((e.entity_type, e.entity_name) for e in x.entity):
            {val.key: val.value for val in x.values} for x in r.entries}


@pytest.mark.parametrize("version", versions(v.ALTER_CLIENT_QUOTAS))
def test_client_quotas(broker: Broker, version: int) -> None:
    ok = [(["user", "alice"], [("producer_byte_rate", 1024.0)])]
    assert _alter(broker, version, [([("user", "alice")], [("producer_byte_rate", 1024.0)]),
                                    ([("client-id", "app"), ("user", "alice")],
                                     [("consumer_byte_rate", 2048.0),
                                      ("request_percentage", 50.0)]),
                                    ([("user", None)], [("producer_byte_rate", 4096.0)]),
                                    ([("ip", "127.0.0.1")],
                                     [("connection_creation_rate", 10.0)])]) == [
        (E.none, None, (("user", "alice"),)),
        (E.none, None, (("client-id", "app"), ("user", "alice"))),
        (E.none, None, (("user", None),)),
        (E.none, None, (("ip", "127.0.0.1"),))]
    assert ok
    assert _alter(broker, version, [([("user", "vo")], [("producer_byte_rate", 9.0)])],
                  validate_only=True)[0][0] == E.none
    bad = _alter(broker, version, [
        ([("user", "b")], [("foo", 1.0)]),
        ([("user", "c")], [("producer_byte_rate", 1.5)]),
        ([("ip", "1.2.3.4"), ("user", "x")], [("connection_creation_rate", 1.0)]),
        ([("user", "")], [("producer_byte_rate", 5.0)]),
        ([("user", "d")], [("producer_byte_rate", 0.0)]),
        ([("user", "e")], [("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)]),
    ])
    assert [m for _, m, _ in bad] == [
        "Invalid configuration key foo",
        "producer_byte_rate cannot be a fractional value.",
        "Invalid quota entity combination, IP entity shouldnot be combined with User or "
        "ClientId",
        "Empty user not supported",
        "Quota producer_byte_rate must be greater than 0",
        "Ignoring duplicate entity ClientQuotaEntity(entries={user=e})"]
    assert {c for c, _, _ in bad} == {E.invalid_request}

    everything = _found(_describe(broker, version, ()))
    assert everything == {
        (("user", "alice"),): {"producer_byte_rate": 1024.0},
        (("client-id", "app"), ("user", "alice")): {"consumer_byte_rate": 2048.0,
                                                     "request_percentage": 50.0},
        (("user", None),): {"producer_byte_rate": 4096.0},
        (("ip", "127.0.0.1"),): {"connection_creation_rate": 10.0}}
    assert set(_found(_describe(broker, version, (("user", 0, "alice"),), strict=True))) == {
        (("user", "alice"),)}
    assert set(_found(_describe(broker, version, (("user", 1, None),)))) == {(("user", None),)}
    assert set(_found(_describe(broker, version, (("client-id", 2, None),)))) == {
        (("client-id", "app"), ("user", "alice"))}
    r = _describe(broker, version, (("group", 2, None),))
    assert (r.error_code, r.entries) == (E.unsupported_version, None)
    r = _describe(broker, version, (("ip", 2, None), ("user", 2, None)))
    assert r.error_code == E.invalid_request

    # removing the last value removes the entity
    assert _alter(broker, version, [([("user", "alice")], [("producer_byte_rate", None)])])[0][0] \
        == E.none
    assert (("user", "alice"),) not in _found(_describe(broker, version, ()))


def test_client_quotas_survive_restart_and_checkpoint(tmp_path: Path) -> None:
    """Quotas are metadata records: replayed from the log after a restart, and
    carried by a metadata checkpoint (a tiny snapshot interval forces one)."""
    extra = {"metadata.log.max.record.bytes.between.snapshots": "1"}
    b = _broker(tmp_path, **extra)
    _alter(b, 1, [([("user", "alice")], [("producer_byte_rate", 1024.0)]),
                  ([("client-id", None)], [("request_percentage", 25.0)])])
    _alter(b, 1, [([("user", "alice")], [("consumer_byte_rate", 10.0)])])
    before = dict(b.state.metadata.image.client_quotas)
    b.close()
    checkpoints = list((tmp_path / "__cluster_metadata-0").glob("*.checkpoint"))
    assert checkpoints, "the test wanted a metadata checkpoint"
    again = _broker(tmp_path, **extra)
    try:
        running.run(again, lambda: running.create_topic(again, "after"))
        assert again.state.metadata.image.client_quotas == before == {
            (("user", "alice"),): {"producer_byte_rate": 1024.0, "consumer_byte_rate": 10.0},
            (("client-id", None),): {"request_percentage": 25.0}}
        assert _found(_describe(again, 1, (("user", 0, "alice"),))) == {
            (("user", "alice"),): {"producer_byte_rate": 1024.0, "consumer_byte_rate": 10.0}}
    finally:
        again.close()


def test_quota_checks() -> None:
    """The pure checks (controller.client_quotas) on what the wire tests do not reach."""
    with pytest.raises(cq.QuotaError, match="too large for an INT"):
        cq.check_value((("ip", None),), "connection_creation_rate", 1e10)
    with pytest.raises(cq.QuotaError, match="not a valid IP or resolvable host"):
        cq.check_entity((("ip", "nowhere.invalid"),), ip_resolves=False)
    cq.check_entity((("ip", "::1"),), ip_resolves=cq.is_ip_literal("::1"))
    assert cq.canonical([("user", "a"), ("client-id", "c"), ("user", "b")]) == (
        ("client-id", "c"), ("user", "b"))
    assert cq.record((("user", None),), [("a", 0, True), ("b", 2, False)]) == {
        "type": "client_quotas", "entity": [["user", None]],
        "ops": [["a", 0.0, True], ["b", 2.0, False]]}


@pytest.mark.parametrize("version", versions(v.DESCRIBE_USER_SCRAM_CREDENTIALS))
def test_describe_user_scram_credentials(broker: Broker, version: int) -> None:
    """Nobody has credentials yet, in Kafka 4.4's words (users in its hash order)."""
    def make(names: tuple[str, ...] | None) -> Any:
        return lambda m: m.DescribeUserScramCredentialsRequest(
            users=None if names is None else tuple(m.UserName(name=n) for n in names))

    for names in (None, ()):
        r = call(broker, v.DESCRIBE_USER_SCRAM_CREDENTIALS, version, make(names))
        assert (r.error_code, r.results) == (E.none, ())
    r = call(broker, v.DESCRIBE_USER_SCRAM_CREDENTIALS, version, make(("alice", "bob", "alice")))
    assert [(x.user, x.error_code, x.error_message) for x in r.results] == [
        ("bob", E.resource_not_found, "Attempt to describe a user credential that does not "
                                      "exist: bob"),
        ("alice", E.duplicate_resource, "Cannot describe SCRAM credentials for the same user "
                                        "twice in a single request: alice")]


def test_concurrent_quota_alterations_of_one_entity_both_count(broker: Broker) -> None:
    """The records carry ops applied in log order: two alterations of one entity in
    flight together both land (a value set computed from the image would lose one)."""
    from kcompat.broker.handlers import HANDLERS
    from kcompat.broker.host.context import RequestContext
    from kcompat.wire import codec

    m = codec.request_module(v.ALTER_CLIENT_QUOTAS, 1)

    def request(key: str) -> Any:
        return m.AlterClientQuotasRequest(validate_only=False, entries=(m.EntryData(
            entity=(m.EntityData(entity_type="user", entity_name="c"),),
            ops=(m.OpData(key=key, value=1024.0, remove=False),)),))

    async def both() -> None:
        async with trio.open_nursery() as nursery:
            for key in ("producer_byte_rate", "consumer_byte_rate"):
                ctx = RequestContext(broker, v.ALTER_CLIENT_QUOTAS, 1, 7, "test")
                nursery.start_soon(HANDLERS[v.ALTER_CLIENT_QUOTAS], ctx, request(key))

    running.run(broker, both)
    assert broker.state.metadata.image.client_quotas == {
        (("user", "c"),): {"producer_byte_rate": 1024.0, "consumer_byte_rate": 1024.0}}
