"""Authentication on secured listeners, and what a client that fails it gets.

One broker with the four listener kinds (PLAINTEXT, SASL_PLAINTEXT with
PLAIN, SSL requiring a client certificate, SASL_SSL), driven with raw
requests encoded by kafka-python's protocol classes (an independent codec)
over plain or TLS sockets: the errors, the closes, the delays and that
nothing is stored by a connection that did not authenticate. Real clients
over the same listeners are compat_tests/test_secured_clients.py.
"""

from __future__ import annotations

import contextlib
import ssl
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from compat_tests._broker import REPO_ROOT, Broker, free_port
from compat_tests._tls import TestPki
from tests.integration._raw import RawConnection

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_admin="admin-secret" user_alice="alice-secret";')
FAILED_DELAY_MS = 300
REAUTH_MS = 1500
SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE = 58, 33, 34


class Secured:
    def __init__(self, broker: Broker, ports: dict[str, int], pki: TestPki) -> None:
        self.broker, self.ports, self.pki = broker, ports, pki

    def raw(self, listener: str, cert: str | None = None) -> RawConnection:
        conn = RawConnection(f"127.0.0.1:{self.ports[listener]}")
        if listener in ("SSL", "SASL_SSL"):
            ctx = ssl.create_default_context(cafile=str(self.pki.ca))
            if cert is not None:
                ident = self.pki.clients.get(cert) or self.pki.untrusted
                ctx.load_cert_chain(str(ident.chain), str(ident.key))
            conn.sock = ctx.wrap_socket(conn.sock, server_hostname="127.0.0.1")
        return conn


def broker_config(ports: dict[str, int], pki: TestPki, data: Path) -> dict[str, Any]:
    return {
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_plaintext.connections.max.reauth.ms": REAUTH_MS,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server.keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),.*$/$1/L,DEFAULT",
        "connection.failed.authentication.delay.ms": FAILED_DELAY_MS,
        "log.dirs": str(data),
        "admin.port": -1,
    }


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    work = tmp_path_factory.mktemp("secured")
    pki = TestPki.create(work / "pki")
    ports = {name: free_port("127.0.0.1")
             for name in ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL")}
    config = work / "broker.yaml"
    config.write_text(yaml.safe_dump(broker_config(ports, pki, work / "data")))
    broker = Broker(work / "broker", port=ports["PLAINTEXT"],
                    extra_args=("--config", str(config))).start()
    try:
        yield Secured(broker, ports, pki)
    finally:
        broker.stop()


def _authenticate(conn: RawConnection, user: str, password: str, version: int = 1) -> Any:
    hs = conn.request(SaslHandshakeRequest[1](mechanism="PLAIN"), SaslHandshakeResponse[1])
    assert hs.error_code == 0, hs
    token = b"\0" + user.encode() + b"\0" + password.encode()
    return conn.request(SaslAuthenticateRequest[version](auth_bytes=token),
                        SaslAuthenticateResponse[version])


def _metadata(conn: RawConnection) -> Any:
    return conn.request(MetadataRequest[4](topics=[], allow_auto_topic_creation=False),
                        MetadataResponse[4])


def test_metadata_answers_with_the_listener_the_client_came_in_on(secured: Secured) -> None:
    for listener in ("PLAINTEXT", "SASL_PLAINTEXT"):
        conn = secured.raw(listener)
        try:
            if listener == "SASL_PLAINTEXT":
                assert _authenticate(conn, "alice", "alice-secret").error_code == 0
            brokers = _metadata(conn).brokers
        finally:
            conn.close()
        assert [(b.host, b.port) for b in brokers] == [("127.0.0.1", secured.ports[listener])]


def test_a_request_before_authentication_closes_the_connection(secured: Secured) -> None:
    conn = secured.raw("SASL_PLAINTEXT")
    try:
        conn.send(MetadataRequest[4](topics=[], allow_auto_topic_creation=False))
        assert conn.closed_by_peer()
    finally:
        conn.close()
    assert "Unexpected Kafka request of type Metadata during SASL handshake" in secured.broker.tail()


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("mallory", "alice-secret")])
def test_a_wrong_password_or_unknown_user_fails_late_and_closes(
        secured: Secured, user: str, password: str) -> None:
    conn = secured.raw("SASL_PLAINTEXT")
    try:
        started = time.monotonic()
        answer = _authenticate(conn, user, password)
        waited = time.monotonic() - started
        assert (answer.error_code, answer.error_message) == (
            SASL_AUTHENTICATION_FAILED, "Authentication failed: Invalid username or password")
        assert waited >= FAILED_DELAY_MS / 1000  # connection.failed.authentication.delay.ms
        assert conn.closed_by_peer()
    finally:
        conn.close()


def test_an_unknown_mechanism_is_refused_with_the_enabled_ones(secured: Secured) -> None:
    conn = secured.raw("SASL_PLAINTEXT")
    try:
        hs = conn.request(SaslHandshakeRequest[1](mechanism="GSSAPI"), SaslHandshakeResponse[1])
        assert (hs.error_code, list(hs.mechanisms)) == (
            UNSUPPORTED_SASL_MECHANISM, ["PLAIN", "SCRAM-SHA-512", "OAUTHBEARER"])
        assert conn.closed_by_peer()
    finally:
        conn.close()


def test_sasl_on_a_plaintext_listener_is_an_illegal_state(secured: Secured) -> None:
    conn = secured.raw("PLAINTEXT")
    try:
        hs = conn.request(SaslHandshakeRequest[1](mechanism="PLAIN"), SaslHandshakeResponse[1])
        assert hs.error_code == ILLEGAL_SASL_STATE
        assert _metadata(conn).brokers  # still open, still served
    finally:
        conn.close()


def test_truncated_and_oversized_tokens(secured: Secured) -> None:
    conn = secured.raw("SASL_PLAINTEXT")
    try:
        conn.request(SaslHandshakeRequest[1](mechanism="PLAIN"), SaslHandshakeResponse[1])
        answer = conn.request(SaslAuthenticateRequest[1](auth_bytes=b"alice\0alice-secret"),
                              SaslAuthenticateResponse[1])
        assert answer.error_code == SASL_AUTHENTICATION_FAILED
        assert "expected 3 tokens" in answer.error_message
        assert conn.closed_by_peer()
    finally:
        conn.close()
    conn = secured.raw("SASL_PLAINTEXT")
    try:  # a size over sasl.server.max.receive.size is refused before it is read
        conn.sock.sendall(struct.pack(">i", 10 * 1024 * 1024) + b"\0" * 1024)
        assert conn.closed_by_peer()
    finally:
        conn.close()
    assert "exceeds sasl.server.max.receive.size 524288" in secured.broker.tail()


def test_plaintext_bytes_on_a_tls_port_close_only_that_connection(secured: Secured) -> None:
    conn = RawConnection(f"127.0.0.1:{secured.ports['SASL_SSL']}")
    try:
        conn.send(MetadataRequest[4](topics=[], allow_auto_topic_creation=False))
        assert conn.closed_by_peer()
    finally:
        conn.close()
    ok = secured.raw("SASL_SSL")
    try:
        assert _authenticate(ok, "alice", "alice-secret").error_code == 0
        assert [b.port for b in _metadata(ok).brokers] == [secured.ports["SASL_SSL"]]
    finally:
        ok.close()


@pytest.mark.parametrize("cert", [None, "stranger"])
def test_a_required_client_certificate_must_come_from_the_trusted_ca(
        secured: Secured, cert: str | None) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        conn = secured.raw("SSL", cert=cert)
        try:  # TLS 1.3: the refusal arrives with the first read
            _metadata(conn)
        finally:
            conn.close()
    conn = secured.raw("SSL", cert="alice")
    try:
        assert [b.port for b in _metadata(conn).brokers] == [secured.ports["SSL"]]
    finally:
        conn.close()


def test_an_expired_authentication_closes_at_the_next_request(secured: Secured) -> None:
    conn = secured.raw("SASL_PLAINTEXT")
    again = secured.raw("SASL_PLAINTEXT")
    try:
        answer = _authenticate(conn, "alice", "alice-secret")
        assert (answer.error_code, answer.session_lifetime_ms) == (0, REAUTH_MS)
        assert _authenticate(again, "alice", "alice-secret").error_code == 0
        # re-authenticating before the deadline keeps the connection (KIP-368)
        time.sleep(REAUTH_MS / 2000)
        assert _authenticate(again, "alice", "alice-secret").error_code == 0
        time.sleep(REAUTH_MS / 1000 * 0.7)
        assert _metadata(again).brokers  # past the first deadline, within the second
        conn.send(MetadataRequest[4](topics=[], allow_auto_topic_creation=False))
        assert conn.closed_by_peer()
    finally:
        conn.close()
        again.close()
    assert "the authentication expired (connections.max.reauth.ms)" in secured.broker.tail()


def test_reauthenticating_as_someone_else_is_refused(secured: Secured) -> None:
    conn = secured.raw("SASL_PLAINTEXT")
    try:
        assert _authenticate(conn, "alice", "alice-secret").error_code == 0
        answer = _authenticate(conn, "admin", "admin-secret")
        assert answer.error_code == SASL_AUTHENTICATION_FAILED
        assert "Cannot change principals during re-authentication" in answer.error_message
        assert conn.closed_by_peer()
    finally:
        conn.close()


def test_a_thousand_failed_logins_leave_others_served(secured: Secured) -> None:
    """50 connections fail 20 logins each, one after another; meanwhile an
    authenticated client keeps asking for metadata and is answered every time."""
    failures: list[int] = []
    errors: list[BaseException] = []

    def attacker() -> None:
        try:
            for _ in range(20):
                conn = secured.raw("SASL_PLAINTEXT")
                try:
                    failures.append(_authenticate(conn, "alice", "guess").error_code)
                finally:
                    conn.close()
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=attacker) for _ in range(50)]
    for t in threads:
        t.start()
    served = 0
    user = secured.raw("SASL_PLAINTEXT")
    try:
        assert _authenticate(user, "alice", "alice-secret").error_code == 0
        while any(t.is_alive() for t in threads):
            if _authenticate(user, "alice", "alice-secret").error_code == 0 and _metadata(user):
                served += 1
    finally:
        for t in threads:
            t.join()
        user.close()
    assert not errors, errors[:3]
    assert failures == [SASL_AUTHENTICATION_FAILED] * 1000
    assert served > 0


def test_print_config_hides_secrets(secured: Secured, tmp_path: Path) -> None:
    config = tmp_path / "b.yaml"
    config.write_text(yaml.safe_dump(broker_config(secured.ports, secured.pki, tmp_path)))
    out = subprocess.run([sys.executable, "-m", "kcompat", "broker", "--config", str(config),
                          "--print-config"], capture_output=True, text=True, cwd=REPO_ROOT,
                         check=True).stdout
    assert "listener.name.sasl_plaintext.plain.sasl.jaas.config=[hidden]" in out
    assert "alice-secret" not in out
    assert f"ssl.keystore.location={secured.pki.server.keystore}" in out


@pytest.mark.parametrize("change,message", [
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms: listener SASL_PLAINTEXT: "
     "kcompat serves PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER; not GSSAPI"),
    ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type: kcompat reads PEM stores only"),
    ({"listener.name.sasl_plaintext.plain.sasl.jaas.config": "nonsense"},
     "listener.name.sasl_plaintext.plain.sasl.jaas.config: expected"),
    ({"listeners": "PLAINTEXT://127.0.0.1:1,BOGUS://127.0.0.1:2"},
     "No security protocol defined for listener BOGUS"),
])
def test_a_listener_it_cannot_serve_stops_the_broker_naming_the_key(
        secured: Secured, tmp_path: Path, change: dict[str, Any], message: str) -> None:
    config = tmp_path / "b.yaml"
    config.write_text(yaml.safe_dump({**broker_config(secured.ports, secured.pki, tmp_path),
                                      **change}))
    run = subprocess.run([sys.executable, "-m", "kcompat", "broker", "--config", str(config)],
                         capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert run.returncode != 0
    assert message in run.stderr


def test_nothing_unauthenticated_is_stored(secured: Secured) -> None:
    """A produce on a SASL listener before authentication closes the
    connection without writing: the topic is never created."""
    conn = secured.raw("SASL_PLAINTEXT")
    try:  # a Produce v3 header (key 0, correlation id 1, no client id), then a body
        with contextlib.suppress(OSError):
            conn.send_bytes(struct.pack(">hhih", 0, 3, 1, -1) + b"\xff\xff" + b"\0" * 64)
        assert conn.closed_by_peer()
    finally:
        conn.close()
    plain = secured.raw("PLAINTEXT")
    try:
        topics = plain.request(MetadataRequest[4](topics=None, allow_auto_topic_creation=False),
                               MetadataResponse[4]).topics
    finally:
        plain.close()
    assert "unauthenticated" not in [t.name for t in topics]


def _get(url: str, token: str | None = None, cafile: Path | None = None) -> int:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    context = None if cafile is None else ssl.create_default_context(cafile=str(cafile))
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_the_admin_port_of_a_secured_broker(secured: Secured, tmp_path: Path) -> None:
    """Secured listeners: the admin HTTP port serves loopback only unless a
    bearer token guards it; with admin.token every request must bear it; it
    speaks TLS with the TLS listeners' keystore (admin.tls=auto), or plain
    HTTP with admin.tls=false."""
    fresh = {name: free_port("127.0.0.1") for name in secured.ports}
    base = broker_config(fresh, secured.pki, tmp_path / "a")
    open_config = tmp_path / "open.yaml"
    open_config.write_text(yaml.safe_dump({**base, "admin.port": 0, "admin.host": "0.0.0.0"}))
    run = subprocess.run([sys.executable, "-m", "kcompat", "broker", "--config",
                          str(open_config)], capture_output=True, text=True, cwd=REPO_ROOT,
                         timeout=60)
    assert run.returncode != 0
    assert "admin.token: the Kafka listeners are secured" in run.stderr
    admin_port = free_port("127.0.0.1")
    ports = {name: free_port("127.0.0.1") for name in secured.ports}
    guarded = tmp_path / "guarded.yaml"
    guarded.write_text(yaml.safe_dump({**broker_config(ports, secured.pki, tmp_path / "b"),
                                       "admin.port": admin_port, "admin.host": "0.0.0.0",
                                       "admin.token": "s3cret"}))
    broker = Broker(tmp_path / "guarded", port=ports["PLAINTEXT"],
                    extra_args=("--config", str(guarded))).start()
    try:
        url = f"https://127.0.0.1:{admin_port}/health"
        assert _get(url, cafile=secured.pki.ca) == 401
        assert _get(url, "wrong", cafile=secured.pki.ca) == 401
        assert _get(url, "s3cret", cafile=secured.pki.ca) == 200
        assert f"admin HTTP on https://0.0.0.0:{admin_port}" in broker.tail()
        with pytest.raises(OSError):  # the port speaks TLS: plain HTTP gets no answer
            _get(f"http://127.0.0.1:{admin_port}/health", "s3cret")
    finally:
        broker.stop()
    plain = tmp_path / "plain.yaml"
    plain_port = free_port("127.0.0.1")
    ports = {name: free_port("127.0.0.1") for name in secured.ports}
    plain.write_text(yaml.safe_dump({**broker_config(ports, secured.pki, tmp_path / "c"),
                                     "admin.port": plain_port, "admin.tls": "false"}))
    broker = Broker(tmp_path / "plain", port=ports["PLAINTEXT"],
                    extra_args=("--config", str(plain))).start()
    try:
        assert _get(f"http://127.0.0.1:{plain_port}/health") == 200  # loopback: no token
    finally:
        broker.stop()


def test_oauthbearer_unsecured_tokens_from_librdkafka(secured: Secured) -> None:
    """confluent-kafka makes its own unsecured JWS (``sasl.oauthbearer.config``):
    its principal produces and reads back; an expired token is refused."""
    from confluent_kafka import Consumer, Producer

    common = {"bootstrap.servers": f"127.0.0.1:{secured.ports['SASL_PLAINTEXT']}",
              "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
              "enable.sasl.oauthbearer.unsecure.jwt": True,
              "sasl.oauthbearer.config": "principal=carol scope=kafka lifeSeconds=600"}
    producer = Producer(common)
    producer.produce("oauth", b"by-carol")
    assert producer.flush(30) == 0
    consumer = Consumer({**common, "group.id": "oauth", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["oauth"])
        deadline = time.monotonic() + 30
        got = None
        while got is None and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                got = message.value()
    finally:
        consumer.close()
    assert got == b"by-carol"
    conn = secured.raw("SASL_PLAINTEXT")
    try:
        hs = conn.request(SaslHandshakeRequest[1](mechanism="OAUTHBEARER"),
                          SaslHandshakeResponse[1])
        assert hs.error_code == 0
        import base64
        import json

        def part(obj: Any) -> str:
            return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

        expired = f"{part({'alg': 'none'})}.{part({'sub': 'carol', 'exp': 1})}."
        first = conn.request(SaslAuthenticateRequest[1](
            auth_bytes=f"n,,\x01auth=Bearer {expired}\x01\x01".encode()),
            SaslAuthenticateResponse[1])
        assert (first.error_code, json.loads(first.auth_bytes)) == (0, {"status": "invalid_token"})
        final = conn.request(SaslAuthenticateRequest[1](auth_bytes=b"\x01"),
                             SaslAuthenticateResponse[1])
        assert (final.error_code, final.error_message) == (
            SASL_AUTHENTICATION_FAILED, "Authentication failed: the token expired")
        assert conn.closed_by_peer()
    finally:
        conn.close()


def test_the_annotated_secured_config_parses() -> None:
    run = subprocess.run([sys.executable, "-m", "kcompat", "broker", "--config",
                          str(REPO_ROOT / "config" / "secured.yaml"), "--print-config"],
                         capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "listener.name.sasl_ssl.plain.sasl.jaas.config=[hidden]" in run.stdout
    assert "change-me" not in run.stdout


def test_a_kafka_server_properties_file_configures_the_broker(
        secured: Secured, tmp_path: Path) -> None:
    """``--config server.properties``: Kafka's own file format, continuation lines
    and all, sets up the same listeners; an unknown key is still named."""
    ports = {"PLAINTEXT": free_port("127.0.0.1"), "SASL_PLAINTEXT": free_port("127.0.0.1")}
    text = (f"listeners=PLAINTEXT://127.0.0.1:{ports['PLAINTEXT']},"
            f"SASL_PLAINTEXT://127.0.0.1:{ports['SASL_PLAINTEXT']}\n"
            "sasl.enabled.mechanisms=PLAIN\n"
            "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common."
            "security.plain.PlainLoginModule required \\\n"
            "    user_alice=\"alice-secret\";\n"
            f"log.dirs={tmp_path / 'data'}\nadmin.port=-1\n")
    (tmp_path / "server.properties").write_text(text)
    broker = Broker(tmp_path / "props", port=ports["PLAINTEXT"],
                    extra_args=("--config", str(tmp_path / "server.properties"))).start()
    try:
        conn = RawConnection(f"127.0.0.1:{ports['SASL_PLAINTEXT']}")
        try:
            assert _authenticate(conn, "alice", "alice-secret").error_code == 0
        finally:
            conn.close()
    finally:
        broker.stop()
    (tmp_path / "bad.properties").write_text(text + "no.such.key=1\n")
    run = subprocess.run([sys.executable, "-m", "kcompat", "broker", "--config",
                          str(tmp_path / "bad.properties")], capture_output=True, text=True,
                         cwd=REPO_ROOT, timeout=60)
    assert run.returncode == 2 and "no.such.key: unknown broker config" in run.stderr
