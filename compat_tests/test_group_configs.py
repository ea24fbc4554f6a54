"""Group configs (ConfigResource GROUP, KIP-848 / KIP-932 / KIP-1191, kcompat's
``kc.share.*``) set and read by confluent-kafka's AdminClient: values and
sources as Apache Kafka 4.4 answers them, Kafka's INVALID_CONFIG messages,
bounds taken from the broker's config, overrides kept across a restart, and
(rf3) a change sent to a broker that is not the controller, which forwards it,
read back from another broker."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from ._broker import Broker
from ._deployment import Deployment

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from _raw import RawConnection  # noqa: E402  (kafka-python's codec over one socket)
from kafka.protocol.admin import (  # noqa: E402
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
GROUP = 32


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


def _alter(admin: AdminClient, group: str, **ops: tuple[Any, str | None]) -> None:
    entries = [ConfigEntry(k.replace("_", "."), val, incremental_operation=op)
               for k, (op, val) in ops.items()]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    admin.incremental_alter_configs([resource], request_timeout=15)[resource].result(timeout=20)


def _describe(admin: AdminClient, group: str) -> dict[str, Any]:
    resource = ConfigResource(ResourceType.GROUP, group)
    return dict(admin.describe_configs([resource], request_timeout=15)[resource]
                .result(timeout=20))


def test_group_configs_set_described_refused_and_kept(tmp_path: Path) -> None:
    b = Broker(tmp_path, extra_args=("--set", "group.share.min.record.lock.duration.ms=1000"))
    b.start()
    try:
        admin = _admin(b.bootstrap)
        fresh = _describe(admin, "g1")  # a group need not exist to have configs
        assert fresh["share.auto.offset.reset"].value == "latest"
        assert fresh["share.auto.offset.reset"].source == ConfigSource.DEFAULT_CONFIG.value
        assert fresh["share.record.lock.duration.ms"].value == "30000"
        assert "kc.share.ordering" not in fresh and len(fresh) == 21
        _alter(admin, "g1", share_auto_offset_reset=(SET, "earliest"),
               kc_share_ordering=(SET, "message-group"),
               share_record_lock_duration_ms=(SET, "1000"))  # allowed: the broker's min
        got = _describe(admin, "g1")
        for key, value in (("share.auto.offset.reset", "earliest"),
                           ("kc.share.ordering", "message-group"),
                           ("share.record.lock.duration.ms", "1000")):
            assert (got[key].value, got[key].source) == (value, ConfigSource.GROUP_CONFIG.value)
        assert got["share.delivery.count.limit"].source == ConfigSource.DEFAULT_CONFIG.value
        synonyms = got["share.record.lock.duration.ms"].synonyms
        assert [(s.name, s.value) for s in synonyms.values()] == [
            ("share.record.lock.duration.ms", "1000"),
            ("group.share.record.lock.duration.ms", "30000")]

        with pytest.raises(KafkaException) as bad:
            _alter(admin, "g1", share_isolation_level=(SET, "sometimes"))
        assert bad.value.args[0].name() == "INVALID_CONFIG"
        assert "share.isolation.level" in bad.value.args[0].str()
        with pytest.raises(KafkaException) as out_of_bounds:
            _alter(admin, "g1", share_record_lock_duration_ms=(SET, "70000"))
        assert out_of_bounds.value.args[0].str() == (
            "share.record.lock.duration.ms must be in the range 1000 to 60000 inclusive.")

        b.restart()
        admin = _admin(b.bootstrap)
        kept = _describe(admin, "g1")
        assert kept["share.auto.offset.reset"].value == "earliest"
        assert kept["kc.share.ordering"].value == "message-group"
        assert kept["share.isolation.level"].value == "read_uncommitted"
        _alter(admin, "g1", share_auto_offset_reset=(DELETE, None))
        assert _describe(admin, "g1")["share.auto.offset.reset"].value == "latest"
    finally:
        b.close()


def _raw_alter(bootstrap: str, group: str, key: str, value: str) -> tuple[int, str | None]:
    R = IncrementalAlterConfigsRequest
    conn = RawConnection(bootstrap, timeout=20)
    try:
        req = R(version=1, validate_only=False, resources=[R.AlterConfigsResource(
            resource_type=GROUP, resource_name=group, configs=[
                R.AlterConfigsResource.AlterableConfig(name=key, config_operation=0,
                                                       value=value)])])
        resp = conn.request(req, IncrementalAlterConfigsResponse[1]).responses[0]
        return resp.error_code, resp.error_message
    finally:
        conn.close()


def _raw_describe(bootstrap: str, group: str, key: str) -> tuple[str, int]:
    R = DescribeConfigsRequest
    conn = RawConnection(bootstrap, timeout=20)
    try:
        req = R(version=4, include_synonyms=False, include_documentation=False, resources=[
            R.DescribeConfigsResource(resource_type=GROUP, resource_name=group,
                                      configuration_keys=[key])])
        result = conn.request(req, DescribeConfigsResponse[4]).results[0]
        assert result.error_code == 0, result.error_message
        (entry,) = result.configs
        return entry.value, entry.config_source
    finally:
        conn.close()


@pytest.mark.parametrize("tbroker", ["rf3"], indirect=True)
def test_group_configs_through_a_non_controller(tbroker: Deployment) -> None:
    assert tbroker.cluster is not None
    controller = tbroker.cluster.wait_for_controller()
    others = [b for node, b in tbroker.cluster.brokers.items() if node != controller]
    group = f"cfg-{controller}-{id(tbroker)}"
    assert _raw_alter(others[0].bootstrap, group, "share.delivery.count.limit", "7") == (0, None)
    # committed by the controller before the answer, so every broker has applied it soon
    for b in (others[1], tbroker.cluster.brokers[controller]):
        for _ in range(50):
            if _raw_describe(b.bootstrap, group, "share.delivery.count.limit")[0] == "7":
                break
            time.sleep(0.1)
        assert _raw_describe(b.bootstrap, group, "share.delivery.count.limit") == ("7", 8)
    code, message = _raw_alter(others[1].bootstrap, group, "share.delivery.count.limit", "99")
    assert (code, message) == (40, "share.delivery.count.limit must be in the range 2 to 10 "
                                    "inclusive.")
    admin = _admin(tbroker.bootstrap)
    _alter(admin, group, kc_share_redelivery_backoff_ms=(SET, "250"))
    # committed by the controller before the answer; the broker the describe
    # reaches serves it from its own image, which may apply it a moment later
    # (as a Kafka broker does): wait for it as above
    for _ in range(50):
        got = _describe(admin, group)
        if "kc.share.redelivery.backoff.ms" in got:
            break
        time.sleep(0.1)
    assert got["kc.share.redelivery.backoff.ms"].value == "250"
    assert got["share.delivery.count.limit"].value == "7"
