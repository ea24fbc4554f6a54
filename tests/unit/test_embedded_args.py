"""kcompat._embedded's command lines and kcompat.pytest_plugin's topic names, without brokers."""

from __future__ import annotations

import re

from kcompat._embedded import _broker_args
from kcompat.pytest_plugin import topic_name


def test_one_broker_binds_port_zero_and_takes_settings_by_kafka_names() -> None:
    args = _broker_args(1, 1, [], "127.0.0.1", {"num.partitions": 3,
                                                "auto.create.topics.enable": False})
    assert args == ["--host", "127.0.0.1", "--port", "0", "--set", "kcompat.codec.warm=false",
                    "--set", "num.partitions=3", "--set", "auto.create.topics.enable=false"]


def test_a_cluster_broker_knows_every_voter_and_replicates_by_default() -> None:
    args = _broker_args(2, 3, [9001, 9002, 9003], "127.0.0.1", {})
    assert args == ["--host", "127.0.0.1", "--port", "9002", "--node-id", "2",
                    "--set", "controller.quorum.voters="
                             "1@127.0.0.1:9001,2@127.0.0.1:9002,3@127.0.0.1:9003",
                    "--set", "default.replication.factor=3", "--set", "kcompat.codec.warm=false"]


def test_a_throwaway_broker_skips_the_codec_warm_up_unless_told_to_warm() -> None:
    assert "kcompat.codec.warm=false" in _broker_args(1, 1, [], "127.0.0.1", {})
    args = _broker_args(1, 1, [], "127.0.0.1", {"kcompat.codec.warm": True})
    assert "kcompat.codec.warm=true" in args and "kcompat.codec.warm=false" not in args


def test_topic_names_are_legal_unique_and_say_the_test() -> None:
    name = topic_name("test_orders[kafka python/2]")
    assert re.fullmatch(r"test_orders-kafka-python-2-[0-9a-f]{8}", name)
    assert topic_name("test_orders") != topic_name("test_orders")
    assert len(topic_name("x" * 500)) <= 249 and topic_name("[]").startswith("topic-")
