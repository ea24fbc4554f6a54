"""Finding the metadata quorum through ``controller.quorum.bootstrap.servers`` (KIP-853).

Theory of operation
-------------------
Kafka 4.x nodes of a dynamic quorum name no voter ids in their config:
``controller.quorum.bootstrap.servers`` lists ``host:port`` of running
controllers, and a node learns the voters from them. kcompat's replication
runtime addresses its peers by node id, so a node started with the
bootstrap servers and without ``controller.quorum.voters`` asks them before it
opens anything (``find_voters``, called by ``server.run_broker``): DescribeQuorum
v2 for ``__cluster_metadata-0``, which any kcompat node answers with the
metadata leader's view — the leader, the voter ids and each voter's listener.
The first answer that names a leader and an address for every voter is the
voter set the runtime starts from, the ``"id@host:port,..."`` text
``controller.quorum.voters`` would have given; from there membership follows
the metadata log (AddRaftVoter / RemoveRaftVoter) as with the voters key.

The addresses are tried in the order given; an address that cannot be reached,
refuses the connection's security, or answers without a leader (an election
running) passes the turn on. Until one answers, the node tries the list again
every ``RETRY_S`` and logs what each address said every ``LOG_EVERY`` rounds:
like a Kafka broker waiting for its quorum it does not give up (SIGTERM stops
it). Each attempt is bounded (``ATTEMPT_S``). The connection speaks the
inter-broker listener's protocol (``peer_security.dialer``): the bootstrap
servers are the nodes' inter-broker listeners, as the voters' addresses are.

The key finds a running quorum; it cannot start one: kcompat has no format
step to name a new cluster's first controllers (Kafka's
``--initial-controllers``), so those name each other in
``controller.quorum.voters``, and a combined node the answer does not list as
a voter is refused (start it broker-only, then ``kcompat cluster add-voter``).

How the two keys combine, as Kafka's KafkaConfig answers: both set, the
voters rule (a static quorum; the bootstrap servers are checked, not asked);
neither set, a broker-only node is refused (``ClusterRuntime``) — while a
combined node is a quorum of one, kcompat's single-node default where Kafka
refuses too.
"""

from __future__ import annotations

import io
import logging
import struct
from typing import Any

import trio
from kio.schema.describe_quorum.v2 import request as dq
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from kcompat.broker.config.broker_config import (
    QUORUM_BOOTSTRAP_SERVERS,
    BrokerConfig,
    parse_host_port,
)
from kcompat.broker.net import listeners, peer_security
from kcompat.wire.codec import response_class

log = logging.getLogger("kcompat.cluster")

METADATA_TOPIC = "__cluster_metadata"
CLIENT_ID = "kcompat-quorum-bootstrap"
ATTEMPT_S = 5.0  # one address: connect, secure, ask, answer
RETRY_S = 1.0  # between rounds over the whole list
LOG_EVERY = 10  # rounds between two warnings while none answers
FRAME_BYTES_MAX = 1 << 20

_SIZE = struct.Struct(">i")
# kcompat has no format step (Kafka's --initial-controllers): a new cluster's
# first nodes name each other in controller.quorum.voters
FIRST_HINT = (" (the nodes of a new cluster name each other in controller.quorum.voters; "
              "the bootstrap servers are for joining a running one)")


class NoAnswer(Exception):
    """An address gave no usable voter set (why, in one line)."""


def bootstrap_servers(config: BrokerConfig) -> list[tuple[str, int]]:
    """The configured bootstrap servers (checked at load: every entry parses)."""
    out = []
    for entry in config[QUORUM_BOOTSTRAP_SERVERS]:
        found = parse_host_port(entry)
        assert found is not None, entry  # the config's check refused it otherwise
        out.append(found)
    return out


def asks(config: BrokerConfig) -> bool:
    """Does this node learn the voters from the bootstrap servers?"""
    return bool(config[QUORUM_BOOTSTRAP_SERVERS]) and not config["controller.quorum.voters"]


def request_frame(correlation_id: int) -> bytes:
    """Size prefix + header v2 + DescribeQuorum v2 for the metadata partition."""
    request = dq.DescribeQuorumRequest(topics=(dq.TopicData(
        topic_name=TopicName(METADATA_TOPIC),
        partitions=(dq.PartitionData(partition_index=i32(0)),)),))
    header = RequestHeader(request_api_key=i16(55), request_api_version=i16(2),
                           correlation_id=i32(correlation_id), client_id=CLIENT_ID)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(RequestHeader)(buf, header)
    entity_writer(dq.DescribeQuorumRequest)(buf, request)
    frame = bytearray(buf.getvalue())
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    return bytes(frame)


def voters_of(answer: bytes, correlation_id: int) -> dict[int, tuple[str, int]]:
    """A DescribeQuorum v2 answer (without its size prefix) -> {voter id:
    (host, port)}; NoAnswer when it has no leader or lacks a voter's address."""
    cls: Any = response_class(55, 2)
    header, at = entity_reader(cls.__header_schema__)(answer, 0)
    if header.correlation_id != correlation_id:
        raise NoAnswer(f"answered correlation id {header.correlation_id}")
    body, _ = entity_reader(cls)(answer, at)
    if body.error_code != ErrorCode.none:
        raise NoAnswer(f"{body.error_code.name}: {body.error_message or ''}".rstrip(": "))
    parts = [p for t in body.topics if t.topic_name == METADATA_TOPIC for p in t.partitions]
    if not parts:
        raise NoAnswer("no answer for the metadata partition")
    part = parts[0]
    if part.error_code != ErrorCode.none or part.leader_id < 0:
        raise NoAnswer(f"no quorum leader ({part.error_code.name}: {part.error_message or ''})")
    where = {int(n.node_id): (n.listeners[0].host, int(n.listeners[0].port))
             for n in body.nodes if n.listeners}
    ids = sorted(int(v.replica_id) for v in part.current_voters)
    missing = [i for i in ids if i not in where]
    if not ids or missing:
        raise NoAnswer(f"no listener for voter(s) {missing or '(none listed)'}")
    return {i: where[i] for i in ids}


def voters_text(voters: dict[int, tuple[str, int]]) -> str:
    return ",".join(f"{node}@{host}:{port}" for node, (host, port) in sorted(voters.items()))


async def _read_frame(stream: trio.abc.Stream) -> bytes:
    buf = bytearray()
    while len(buf) < 4 or len(buf) < 4 + _SIZE.unpack_from(buf)[0]:
        if len(buf) >= 4 and _SIZE.unpack_from(buf)[0] > FRAME_BYTES_MAX:
            raise NoAnswer("answer too large")
        chunk = await stream.receive_some(65536)
        if not chunk:
            raise NoAnswer("the connection closed before an answer")
        buf += chunk
    return bytes(buf[4:])


async def ask(host: str, port: int, secure: peer_security.Secure | None,
              correlation_id: int = 1) -> dict[int, tuple[str, int]]:
    """One bootstrap server's voter set, within ``ATTEMPT_S``."""
    with trio.move_on_after(ATTEMPT_S):
        try:
            sock = await trio.open_tcp_stream(host, port)
        except OSError as e:
            raise NoAnswer(f"cannot connect: {e}") from None
        stream: trio.abc.Stream = sock
        try:
            if secure is not None:
                stream = await secure(sock, host)
            await stream.send_all(request_frame(correlation_id))
            return voters_of(await _read_frame(stream), correlation_id)
        except (OSError, ValueError, trio.BrokenResourceError, trio.TooSlowError,
                peer_security.PeerAuthError) as e:  # ValueError: an answer kio cannot read
            raise NoAnswer(f"{type(e).__name__}: {e}") from None
        finally:
            await stream.aclose()
    raise NoAnswer(f"no answer in {ATTEMPT_S:g} s")


async def find_voters(config: BrokerConfig) -> str | None:
    """The voters as ``controller.quorum.voters`` text, learnt from the
    bootstrap servers; None when this node does not ask them (``asks``)."""
    if not asks(config):
        return None
    servers = bootstrap_servers(config)
    link = listeners.parse(config)[0]  # the inter-broker listener
    secure = peer_security.dialer(config, link, strict=True)
    rounds = 0
    while True:
        said: list[str] = []
        for host, port in servers:
            try:
                found = await ask(host, port, secure, correlation_id=rounds + 1)
            except NoAnswer as e:
                said.append(f"{host}:{port}: {e}")
                continue
            text = voters_text(found)
            log.info("metadata quorum voters from %s %s:%d: %s", QUORUM_BOOTSTRAP_SERVERS,
                     host, port, text)
            return text
        rounds += 1
        if rounds % LOG_EVERY == 1:
            log.warning("no node of %s gave the metadata quorum's voters yet (%s); "
                        "trying again%s", QUORUM_BOOTSTRAP_SERVERS, "; ".join(said), FIRST_HINT)
        await trio.sleep(RETRY_S)
