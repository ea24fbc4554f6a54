"""Bad input closes one connection with a logged reason; the broker and other
connections carry on (issue 2, point 8)."""

from __future__ import annotations

import struct

from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse

from compat_tests._broker import Broker
from tests.integration._raw import RawConnection


def api_versions_ok(broker: Broker) -> bool:
    conn = RawConnection(broker.bootstrap)
    try:
        resp = conn.request(ApiVersionsRequest[0](), ApiVersionsResponse[0])
        return resp.error_code == 0 and len(resp.api_keys) > 5
    finally:
        conn.close()


def test_unknown_api_key_closes_only_that_connection(broker: Broker) -> None:
    bystander = RawConnection(broker.bootstrap)
    bad = RawConnection(broker.bootstrap)
    bad.send_bytes(struct.pack(">hhih", 999, 0, 1, -1))
    assert bad.closed_by_peer()
    assert bystander.request(ApiVersionsRequest[0](), ApiVersionsResponse[0]).error_code == 0
    assert "unknown API key 999" in broker.tail()


def test_malformed_body_closes_connection(broker: Broker) -> None:
    bad = RawConnection(broker.bootstrap)
    # Metadata v12 header (flexible) followed by garbage that is not a valid body
    bad.send_bytes(struct.pack(">hhih", 3, 12, 1, -1) + b"\x00" + b"\xff\xff\xff\xff\x07")
    assert bad.closed_by_peer()
    assert "malformed Metadata v12" in broker.tail()
    assert api_versions_ok(broker)


def test_truncated_header_closes_connection(broker: Broker) -> None:
    bad = RawConnection(broker.bootstrap)
    bad.send_bytes(b"\x00\x03")
    assert bad.closed_by_peer()
    assert api_versions_ok(broker)


def test_oversized_frame_refused_before_buffering(broker: Broker) -> None:
    bad = RawConnection(broker.bootstrap)
    # announce 200 MiB (> socket.request.max.bytes = 100 MiB) and send nothing more:
    # the broker must close at once instead of waiting for the bytes
    bad.sock.sendall(struct.pack(">i", 200 * 1024 * 1024) + b"\x00" * 16)
    assert bad.closed_by_peer(timeout=5)
    assert "exceeds socket.request.max.bytes" in broker.tail()
    assert api_versions_ok(broker)


def test_unsupported_version_closes_connection(broker: Broker) -> None:
    bad = RawConnection(broker.bootstrap)
    bad.send_bytes(struct.pack(">hhih", 0, 1, 1, -1))  # Produce v1: advertised, not parsed
    assert bad.closed_by_peer()
    assert "Produce v1 is not supported" in broker.tail()


def test_future_api_versions_gets_v0_error_with_table(broker: Broker) -> None:
    conn = RawConnection(broker.bootstrap)
    # ApiVersions v9 (unknown to us): flexible header v2 with client id and empty tags
    conn.send_bytes(struct.pack(">hhih", 18, 9, 42, 1) + b"x" + b"\x00" + b"\x00\x00")
    frame = conn.recv_frame()
    cid, error_code = struct.unpack(">ih", frame[:6])
    assert (cid, error_code) == (42, 35)
    body = ApiVersionsResponse[0].decode(frame[4:])
    assert {k.api_key for k in body.api_keys} >= {0, 1, 3, 18}


def test_garbage_fuzz_never_kills_broker(broker: Broker) -> None:
    import random

    rng = random.Random(1234)
    for _ in range(200):
        conn = RawConnection(broker.bootstrap)
        key = rng.choice([0, 1, 2, 3, 18, 19, 32, rng.randrange(-5, 200)])
        version = rng.randrange(-1, 14)
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 64)))
        conn.send_bytes(struct.pack(">hhi", key, version, 7) + body)
        conn.sock.settimeout(2)
        try:
            conn.sock.recv(65536)
        except OSError:
            pass
        conn.close()
    assert broker.running
    assert api_versions_ok(broker)
    assert "Traceback" not in broker.tail(400)


def test_produce_to_an_internal_topic_is_refused(broker: Broker) -> None:
    """As Kafka: INVALID_TOPIC_EXCEPTION; the coordinators' and the schedule's
    logs hold only what the broker wrote."""
    from kafka import KafkaConsumer
    from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

    from tests.integration.test_admin_http import make_batch

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="makes-offsets-topic")
    consumer.subscribe(["whatever"])
    consumer.poll(timeout_ms=2000)  # FindCoordinator creates __consumer_offsets
    consumer.close()
    pd = ProduceRequest.TopicProduceData
    req = ProduceRequest[9](transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        pd(name="__consumer_offsets", partition_data=[pd.PartitionProduceData(
            index=0, records=make_batch(1))])])
    conn = RawConnection(broker.bootstrap)
    try:
        part = conn.request(req, ProduceResponse[9]).responses[0].partition_responses[0]
    finally:
        conn.close()
    assert part.error_code == 17  # INVALID_TOPIC_EXCEPTION
    assert api_versions_ok(broker)
