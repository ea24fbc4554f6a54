"""``controller.quorum.bootstrap.servers`` (KIP-853, issue 32): the key is
accepted with Kafka's validation (``host:port`` entries, refused in
QuorumConfig's words), combines with ``controller.quorum.voters`` as Kafka's
KafkaConfig does (both: the voters rule; neither: a broker-only node is
refused), and a node started with it learns the voters from the first listed
node that answers DescribeQuorum v2 (``quorum_bootstrap``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from kio.schema.describe_quorum.v2 import response as dqr
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i64, u16

from compat_tests._broker import free_port
from kcompat.broker.config import broker_config
from kcompat.broker.config.configdef import ConfigError
from kcompat.broker.host.broker import Broker
from kcompat.broker.node import quorum_bootstrap as qb
from kcompat.wire.codec import encode_response

KEY = "controller.quorum.bootstrap.servers"


def _config(tmp_path: Path, **flags: str) -> broker_config.BrokerConfig:
    return broker_config.load(None, {"log.dirs": str(tmp_path), "port": 0, "admin.port": -1,
                                     **{k.replace("_", "."): v for k, v in flags.items()}}, {})


def test_the_key_takes_host_port_entries(tmp_path: Path) -> None:
    cfg = _config(tmp_path, **{KEY: "h1:9093, h2:9094,[::1]:9095"})
    assert cfg[KEY] == ["h1:9093", "h2:9094", "[::1]:9095"]
    assert qb.bootstrap_servers(cfg) == [("h1", 9093), ("h2", 9094), ("[::1]", 9095)]
    assert KEY in cfg.explicit


@pytest.mark.parametrize(("value", "part", "entry"), [
    ("h1", "host name", "h1"), (":9093", "host name", ":9093"),
    ("h1:port", "host port", "h1:port"), ("h1:9093,h2", "host name", "h2"),
    ("h1:70000", "host port", "h1:70000"), ("1@h1:9093", "host name", "1@h1:9093"),
])
def test_a_bad_entry_is_refused_in_kafkas_words(tmp_path: Path, value: str, part: str,
                                                entry: str) -> None:
    with pytest.raises(ConfigError) as e:
        _config(tmp_path, **{KEY: value})
    assert e.value.key == KEY
    assert (f"Failed to parse {part} from {entry} for the configuration {KEY}. "
            'Each entry should be in the form "{host}:{port}"') in str(e.value)


def test_only_the_bootstrap_servers_make_a_node_ask(tmp_path: Path) -> None:
    assert qb.asks(_config(tmp_path, **{KEY: "h1:1"}))
    # both set: the voters rule, as in Kafka (a static quorum); nothing is asked
    assert not qb.asks(_config(tmp_path, **{KEY: "h1:1",
                                           "controller.quorum.voters": "1@h1:1"}))
    assert not qb.asks(_config(tmp_path))
    assert trio.run(qb.find_voters, _config(tmp_path)) is None


def test_a_broker_only_node_naming_neither_is_refused(tmp_path: Path) -> None:
    cfg = _config(tmp_path, **{"process.roles": "broker", "node.id": "4"})
    with pytest.raises(ConfigError, match="name its controllers in "
                       "controller.quorum.bootstrap.servers"):
        Broker(cfg)


def _answer(voters: list[int], nodes: dict[int, tuple[str, int]], leader: int = 1,
            code: ErrorCode = ErrorCode.none) -> Any:
    def state(node: int) -> Any:
        return dqr.ReplicaState(replica_id=BrokerId(node), replica_directory_id=None,
                                log_end_offset=i64(10))

    part = dqr.PartitionData(partition_index=i32(0), error_code=code, error_message=None,
                             leader_id=BrokerId(leader), leader_epoch=i32(3),
                             high_watermark=i64(10),
                             current_voters=tuple(state(n) for n in voters),
                             observers=(state(9),))
    return dqr.DescribeQuorumResponse(
        error_code=ErrorCode.none, error_message=None,
        topics=(dqr.TopicData(topic_name=TopicName("__cluster_metadata"), partitions=(part,)),),
        nodes=tuple(dqr.Node(node_id=BrokerId(n), listeners=(dqr.Listener(
            name="PLAINTEXT", host=h, port=u16(p)),)) for n, (h, p) in nodes.items()))


def _frame(body: Any, correlation_id: int = 1) -> bytes:
    return encode_response(55, 2, correlation_id, body)[4:]


def test_the_voters_come_from_a_describe_quorum_answer() -> None:
    nodes = {1: ("h1", 9001), 2: ("h2", 9002), 3: ("h3", 9003), 9: ("h9", 9009)}
    found = qb.voters_of(_frame(_answer([3, 1, 2], nodes)), 1)
    assert found == {1: ("h1", 9001), 2: ("h2", 9002), 3: ("h3", 9003)}
    assert qb.voters_text(found) == "1@h1:9001,2@h2:9002,3@h3:9003"


@pytest.mark.parametrize(("body", "says"), [
    (_answer([1, 2], {1: ("h1", 1), 2: ("h2", 2)}, leader=-1,
             code=ErrorCode.not_leader_or_follower), "no quorum leader"),
    (_answer([1, 2], {1: ("h1", 1)}), "no listener for voter(s) [2]"),
    (_answer([], {}), "no listener"),
])
def test_an_answer_without_a_usable_voter_set_is_no_answer(body: Any, says: str) -> None:
    with pytest.raises(qb.NoAnswer, match=says.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        qb.voters_of(_frame(body), 1)
    with pytest.raises(qb.NoAnswer, match="correlation id 1"):
        qb.voters_of(_frame(_answer([1], {1: ("h1", 1)})), 2)


def test_find_voters_asks_in_order_past_a_dead_and_a_leaderless_node(tmp_path: Path) -> None:
    """The first address refuses connections, the second answers without a
    leader (an election running), the third gives the voters: the node starts
    from those, having asked each once, in the order given."""
    asked: list[str] = []
    voters = {1: ("127.0.0.1", 9001), 2: ("127.0.0.1", 9002), 3: ("127.0.0.1", 9003)}

    async def fake(name: str, body: Any, stream: trio.SocketStream) -> None:
        request = b""
        while len(request) < 4 or len(request) < 4 + int.from_bytes(request[:4], "big"):
            request += await stream.receive_some(4096)
        asked.append(name)
        correlation_id = int.from_bytes(request[8:12], "big")
        await stream.send_all(encode_response(55, 2, correlation_id, body))
        await stream.aclose()

    async def main() -> str | None:
        async with trio.open_nursery() as nursery:
            ports = []
            for name, body in (("leaderless", _answer([1], {1: voters[1]}, leader=-1,
                                                      code=ErrorCode.not_leader_or_follower)),
                               ("answering", _answer([1, 2, 3], voters))):
                listeners = await nursery.start(trio.serve_tcp, lambda s, n=name, b=body:
                                                fake(n, b, s), 0)
                ports.append(listeners[0].socket.getsockname()[1])
            servers = f"127.0.0.1:{free_port()},127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}"
            found = await qb.find_voters(_config(tmp_path, **{
                KEY: servers, "process.roles": "broker", "node.id": "4"}))
            nursery.cancel_scope.cancel()
            return found

    assert trio.run(main) == "1@127.0.0.1:9001,2@127.0.0.1:9002,3@127.0.0.1:9003"
    assert asked == ["leaderless", "answering"]
