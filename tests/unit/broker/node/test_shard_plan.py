"""Each shard's configuration (``node.shards.plan``): shard 0 is the node as
configured, shard k a broker-only node beside it on the same machine."""

from __future__ import annotations

from typing import Any

import pytest

from kcompat.broker.config import broker_config
from kcompat.broker.config.configdef import ConfigError
from kcompat.broker.node.shards import plan, shard_count, supervises


def config(**flags: Any) -> broker_config.BrokerConfig:
    return broker_config.load(None, {k.replace("_", "."): v for k, v in flags.items()}, {})


def test_shard_zero_is_the_node_as_configured() -> None:
    cfg = config(**{"node.id": "7", "port": "9100", "log.dirs": "/d/k", "kcompat.cores": "3",
                    "num.partitions": "5"})
    zero = plan(cfg, 3)[0]
    assert (zero.node_id, zero.port) == (7, 9100)
    assert zero.values["node.id"] == "7" and zero.values["log.dirs"] == "/d/k"
    assert "process.roles" not in zero.values  # as configured: a voter
    assert zero.values["kcompat.shard"] == "0" and zero.values["kcompat.machine.id"] == "7"
    assert zero.values["num.partitions"] == "5"  # the node's own keys are every shard's


def test_shard_k_is_a_broker_only_node_beside_it() -> None:
    cfg = config(**{"node.id": "7", "port": "9100", "admin.port": "9700",
                    "log.dirs": "/d/k/", "kcompat.cores": "3"})
    two = plan(cfg, 3)[2]
    assert (two.node_id, two.port) == (2007, 9102)
    assert two.values["process.roles"] == "broker"
    assert two.values["log.dirs"] == "/d/k-shard2"
    assert two.values["admin.port"] == "9702"
    assert two.values["kcompat.machine.id"] == "7" and two.values["kcompat.shard"] == "2"
    # a node alone: its shards find the quorum through shard 0
    assert two.values["controller.quorum.bootstrap.servers"] == "127.0.0.1:9100"


def test_in_a_cluster_the_shards_join_the_named_voters() -> None:
    voters = "1@h1:9092,2@h2:9092,3@h3:9092"
    cfg = config(**{"node.id": "2", "host": "h2", "port": "9092", "kcompat.cores": "2",
                    "controller.quorum.voters": voters, "kcompat.machine.id": "rack-2-box"})
    one = plan(cfg, 2)[1]
    assert one.values["controller.quorum.voters"] == voters
    assert "controller.quorum.bootstrap.servers" not in one.values
    assert one.values["kcompat.machine.id"] == "rack-2-box"


def test_listeners_move_up_by_the_shard_index() -> None:
    cfg = config(**{"listeners": "PLAINTEXT://127.0.0.1:9200,SSL://127.0.0.1:9300",
                    "kcompat.cores": "2"})
    one = plan(cfg, 2)[1]
    assert one.values["listeners"] == "PLAINTEXT://127.0.0.1:9201,SSL://127.0.0.1:9301"
    assert "port" not in one.values and one.port == 9201
    with pytest.raises(ConfigError, match="fixed listener ports"):
        plan(config(**{"listeners": "PLAINTEXT://127.0.0.1:0", "kcompat.cores": "2"}), 2)


def test_port_zero_is_picked_once_for_every_shard() -> None:
    shards = plan(config(**{"port": "0", "kcompat.cores": "2"}), 2)
    assert shards[0].port > 0 and shards[1].port == shards[0].port + 1
    assert shards[1].values["controller.quorum.bootstrap.servers"].endswith(
        f":{shards[0].port}")


def test_who_supervises() -> None:
    assert not supervises(config())  # one core: the broker itself
    assert supervises(config(**{"kcompat.cores": "2"}))
    assert not supervises(config(**{"kcompat.cores": "2", "kcompat.shard": "1"}))
    assert shard_count(config(**{"kcompat.cores": "0"})) >= 1
