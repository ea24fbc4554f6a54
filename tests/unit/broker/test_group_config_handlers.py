"""IncrementalAlterConfigs, AlterConfigs and DescribeConfigs on GROUP
resources (type 32), in-process at every advertised version: Kafka 4.4's
codes, messages, sources and synonyms; overrides survive a restart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kcompat.broker.config import broker_config
from kcompat.broker.config.group_config import effective_group_config
from kcompat.broker.host.broker import Broker
from kcompat.wire import versions as v
from tests.unit.broker.test_admin_handlers import call, versions

E = ErrorCode
GROUP = 32


def _open(path: Path, snapshot_bytes: int = 20971520) -> Broker:
    return Broker(broker_config.load(None, {
        "log.dirs": str(path), "group.share.delivery.count.limit": "6",
        "metadata.log.max.record.bytes.between.snapshots": str(snapshot_bytes)}, {}))


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = _open(tmp_path)
    yield b
    b.close()


def incremental(broker: Broker, version: int, *ops: tuple[str, int, str | None],
                name: str = "g1", validate: bool = False) -> Any:
    def make(m: ModuleType) -> Any:
        cfgs = tuple(m.AlterableConfig(name=k, config_operation=o, value=x) for k, o, x in ops)
        return m.IncrementalAlterConfigsRequest(validate_only=validate, resources=(
            m.AlterConfigsResource(resource_type=GROUP, resource_name=name, configs=cfgs),))
    resp = call(broker, v.INCREMENTAL_ALTER_CONFIGS, version, make).responses[0]
    return resp.error_code, resp.error_message


def describe(broker: Broker, version: int, name: str = "g1",
             keys: tuple[str, ...] | None = None) -> Any:
    def make(m: ModuleType) -> Any:
        extra = {"include_documentation": True} if version >= 3 else {}
        return m.DescribeConfigsRequest(include_synonyms=True, **extra, resources=(
            m.DescribeConfigsResource(resource_type=GROUP, resource_name=name,
                                      configuration_keys=keys),))
    return call(broker, v.DESCRIBE_CONFIGS, version, make).results[0]


@pytest.mark.parametrize("version", versions(v.INCREMENTAL_ALTER_CONFIGS))
def test_incremental_alter_group_configs(broker: Broker, version: int) -> None:
    assert incremental(broker, version, ("share.auto.offset.reset", 0, "earliest"),
                       validate=True) == (E.none, None)
    assert broker.state.group_configs == {}
    assert incremental(broker, version, ("share.auto.offset.reset", 0, "earliest"),
                       ("kc.share.ordering", 0, "message-group"),
                       ("nope", 1, None)) == (E.none, None)
    assert broker.state.group_configs == {"g1": {"share.auto.offset.reset": "earliest",
                                                 "kc.share.ordering": "message-group"}}
    assert incremental(broker, version, ("share.record.lock.duration.ms", 0, "1000")) == (
        E.invalid_config,
        "share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive.")
    assert incremental(broker, version, ("nope.key", 0, "1")) == (
        E.invalid_config, "Unknown group config name: nope.key")
    assert incremental(broker, version, ("share.auto.offset.reset", 2, "x")) == (
        E.invalid_config,
        "Can't APPEND to key share.auto.offset.reset because its type is not LIST.")
    assert incremental(broker, version, ("streams.rack.aware.assignment.tags", 2, "a,b"))[0] \
        == E.none
    assert incremental(broker, version, ("streams.rack.aware.assignment.tags", 3, "a"))[0] \
        == E.none
    assert broker.state.group_configs["g1"]["streams.rack.aware.assignment.tags"] == ["b"]
    assert incremental(broker, version, ("share.auto.offset.reset", 0, "x"), name="") == (
        E.invalid_request, "Default group resources are not allowed.")
    assert incremental(broker, version, ("share.auto.offset.reset", 0, None))[0] \
        == E.invalid_request
    for key in ("share.auto.offset.reset", "kc.share.ordering",
                "streams.rack.aware.assignment.tags"):
        assert incremental(broker, version, (key, 1, None)) == (E.none, None)
    assert broker.state.group_configs == {}  # no overrides left: the group is gone


@pytest.mark.parametrize("version", versions(v.ALTER_CONFIGS))
def test_alter_configs_replaces_group_overrides(broker: Broker, version: int) -> None:
    def run(**configs: str) -> Any:
        def make(m: ModuleType) -> Any:
            cfgs = tuple(m.AlterableConfig(name=k.replace("_", "."), value=x)
                         for k, x in configs.items())
            return m.AlterConfigsRequest(validate_only=False, resources=(
                m.AlterConfigsResource(resource_type=GROUP, resource_name="g4", configs=cfgs),))
        resp = call(broker, v.ALTER_CONFIGS, version, make).responses[0]
        return resp.error_code, resp.error_message

    assert run(share_delivery_count_limit="7", share_isolation_level="read_committed") == (
        E.none, None)
    assert run(share_delivery_count_limit="7") == (E.none, None)
    assert broker.state.group_configs == {"g4": {"share.delivery.count.limit": 7}}
    assert run(bad_key="1") == (E.invalid_config, "Unknown group config name: bad.key")
    assert run() == (E.none, None)
    assert broker.state.group_configs == {}


@pytest.mark.parametrize("version", versions(v.DESCRIBE_CONFIGS))
def test_describe_group_configs(broker: Broker, version: int) -> None:
    fresh = describe(broker, version, "never-seen")
    assert fresh.error_code == E.none
    entries = {c.name: c for c in fresh.configs}
    assert len(entries) == 21 and "kc.share.ordering" not in entries
    limit = entries["share.delivery.count.limit"]
    assert (limit.value, limit.config_source, limit.read_only) == ("6", 4, False)
    assert [(s.name, s.value, s.source) for s in limit.synonyms] == [
        ("group.share.delivery.count.limit", "6", 4),
        ("group.share.delivery.count.limit", "5", 5)]
    assert (entries["streams.assignor.name"].value, entries["streams.assignor.name"].synonyms[0]
            .name) == ("sticky", "group.streams.assignors")
    incremental(broker, 1, ("share.auto.offset.reset", 0, "earliest"),
                ("kc.share.ordering", 0, "message-group"))
    entries = {c.name: c for c in describe(broker, version).configs}
    reset, ordering = entries["share.auto.offset.reset"], entries["kc.share.ordering"]
    assert (reset.value, reset.config_source) == ("earliest", 8)
    assert [(s.name, s.value, s.source) for s in reset.synonyms] == [
        ("share.auto.offset.reset", "earliest", 8), ("share.auto.offset.reset", "latest", 5)]
    assert (ordering.value, ordering.config_source) == ("message-group", 8)
    asked = describe(broker, version, keys=("kc.share.redelivery.backoff.ms",)).configs
    assert [(c.name, c.value, c.config_source) for c in asked] == [
        ("kc.share.redelivery.backoff.ms", "0", 5)]
    if version >= 3:
        assert reset.config_type == 2 and limit.config_type == 3
        assert "share-partition start offset" in reset.documentation
    empty = describe(broker, version, "")
    assert (empty.error_code, empty.error_message) == (
        E.invalid_request, "Group name must not be empty")


@pytest.mark.parametrize("snapshot_bytes", [20971520, 1])  # replayed, or from a checkpoint
def test_overrides_survive_restart_and_feed_the_service(tmp_path: Path,
                                                         snapshot_bytes: int) -> None:
    b = _open(tmp_path, snapshot_bytes)
    try:
        incremental(b, 1, ("share.record.lock.duration.ms", 0, "20000"),
                    ("kc.share.redelivery.backoff.multiplier", 0, "3"))
        incremental(b, 1, ("kc.share.ordering", 0, "none"), name="g2")
        incremental(b, 1, ("kc.share.ordering", 1, None), name="g2")
    finally:
        b.close()
    checkpoints = list((tmp_path / "__cluster_metadata-0").glob("*.checkpoint"))
    assert bool(checkpoints) == (snapshot_bytes == 1)
    b = _open(tmp_path)
    try:
        assert describe(b, 4, "g0").error_code == E.none  # replays the metadata log
        assert b.state.group_configs == {"g1": {"share.record.lock.duration.ms": 20000,
                                                "kc.share.redelivery.backoff.multiplier": 3.0}}
        values = effective_group_config(b.state, "g1")
        assert values["share.record.lock.duration.ms"] == 20000
        assert values["kc.share.redelivery.backoff.multiplier"] == 3.0
        assert values["share.delivery.count.limit"] == 6  # the broker's
        assert effective_group_config(b.state, "other")["share.auto.offset.reset"] == "latest"
    finally:
        b.close()
