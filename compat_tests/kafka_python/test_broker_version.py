"""kafka-python infers the broker version from ApiVersions maxima (KafkaClient
``check_version``, ``api_version`` auto): against kcompat it must read a Kafka of
at least 4.1 (Produce v13 advertised), as against Apache Kafka 4.4 (issue 18
item 6; ``java/test_newest_versions_differential.py`` compares the two)."""

from __future__ import annotations

from kafka.net.compat import KafkaNetClient

from compat_tests._broker import Broker


def test_inferred_broker_version_is_at_least_4_1(module_broker: Broker) -> None:
    client = KafkaNetClient(bootstrap_servers=module_broker.bootstrap)
    try:
        version = client.check_version()
    finally:
        client.close()
    assert version >= (4, 1), version
