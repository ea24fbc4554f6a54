"""The ``kcompat`` client commands on secured listeners, as processes against a
real broker process: SASL_SSL with SCRAM-SHA-512 (a user the CLI itself
creates with ``kcompat users add``) and SSL requiring a client certificate,
each through a Kafka client properties file (``--command-config``) and through
the flags. Topics, produce, consume (a consumer group, and a share group over
the CLI's raw kio connections), groups and cluster info all work; a wrong
password, a missing client certificate and an untrusted broker each fail
with one line naming the cause."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kio.schema.metadata.v12 import request as metadata

from compat_tests._broker import Broker, free_port, unique_topic
from compat_tests._tls import TestPki
from kcompat.cli._kio import Connection
from kcompat.cli._security import ClientSecurity

pytestmark = pytest.mark.timeout(180)

SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PASSWORD = "alice-secret"
REAUTH_MS = 1000  # connections.max.reauth.ms of the SHORT listener (SASL_PLAINTEXT)


@dataclass(frozen=True)
class Secured:
    broker: Broker
    ports: dict[str, int]
    pki: TestPki
    configs: dict[str, Path]  # listener -> its client properties file

    def server(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


def _client_properties(work: Path, pki: TestPki) -> dict[str, Path]:
    sasl = work / "sasl_ssl.properties"
    sasl.write_text(
        "# alice over SASL_SSL, as kafka-topics.sh --command-config would take it\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        f"sasl.jaas.config={SCRAM_MODULE} required \\\n"
        f'    username="alice" \\\n    password="{PASSWORD}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={pki.ca}\n")
    tls = work / "ssl.properties"
    tls.write_text(
        "security.protocol: SSL\n"
        "ssl.truststore.type: PEM\n"
        f"ssl.truststore.location: {pki.ca}\n"
        "ssl.keystore.type: PEM\n"
        f"ssl.keystore.location: {pki.clients['alice'].keystore}\n")
    return {"SASL_SSL": sasl, "SSL": tls}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    work = tmp_path_factory.mktemp("cli-security")
    pki = TestPki.create(work / "pki")
    ports = {name: free_port() for name in ("PLAINTEXT", "SASL_SSL", "SSL", "SHORT")}
    config = work / "broker.yaml"
    config.write_text(yaml.safe_dump({
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL,"
                                          "SHORT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": f"{SCRAM_MODULE} required;",
        "listener.name.short.scram-sha-512.sasl.jaas.config": f"{SCRAM_MODULE} required;",
        "listener.name.short.connections.max.reauth.ms": REAUTH_MS,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server.keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "group.initial.rebalance.delay.ms": 0,
    }))
    broker = Broker(work / "broker", port=ports["PLAINTEXT"],
                    extra_args=("--admin-port", "-1", "--config", str(config)))
    broker.start()
    try:
        secured = Secured(broker, ports, pki, _client_properties(work, pki))
        kc(secured, "PLAINTEXT", "users", "add", "alice", "--password", PASSWORD,
           "--mechanism", "SCRAM-SHA-512")
        yield secured
    finally:
        broker.close()


def kc(s: Secured, listener: str, *args: str, stdin: str | None = None, expect: int = 0,
       config: bool = True) -> subprocess.CompletedProcess[str]:
    """``kcompat <args>`` at ``listener``, with its --command-config unless not ``config``."""
    security = (["--command-config", str(s.configs[listener])]
                if config and listener in s.configs else [])
    proc = subprocess.run([sys.executable, "-m", "kcompat", *args,
                           "--bootstrap-server", s.server(listener), *security],
                          input=stdin, capture_output=True, text=True, timeout=60)
    assert proc.returncode == expect, (args, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    if expect:
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc


@pytest.mark.parametrize("listener", ["SASL_SSL", "SSL"])
def test_client_commands_with_command_config(secured: Secured, listener: str) -> None:
    topic, group = unique_topic(listener.lower()), f"g-{listener.lower()}"
    kc(secured, listener, "topics", "create", topic, "--partitions", "2")
    listed = json.loads(kc(secured, listener, "topics", "list", "--json").stdout)
    assert {"topic": topic, "partitions": 2, "internal": False} in listed
    kc(secured, listener, "produce", topic, "--partition", "0", stdin="one\ntwo\nthree\n")
    out = kc(secured, listener, "consume", topic, "--from", "earliest", "--group", group,
             "--count", "3").stdout
    assert out.splitlines() == ["one", "two", "three"]
    groups = json.loads(kc(secured, listener, "groups", "list", "--json").stdout)
    assert group in [g["group"] for g in groups]
    info = json.loads(kc(secured, listener, "cluster", "info", "--json").stdout)
    # the broker answers with the listener the client came in on
    assert [(b["host"], b["port"]) for b in info["brokers"]] == [
        ("127.0.0.1", secured.ports[listener])]
    assert info["topics"] >= 1


def test_share_groups_over_the_clis_own_connections(secured: Secured) -> None:
    """consume --share-group and groups describe of a share group speak raw kio:
    every connection they open (bootstrap, then the coordinator) logs in."""
    topic = unique_topic("share")
    kc(secured, "SASL_SSL", "topics", "create", topic)
    kc(secured, "SASL_SSL", "consume", topic, "--share-group", "sg", "--count", "1",
       "--timeout-ms", "3000")
    described = json.loads(kc(secured, "SASL_SSL", "groups", "describe", "sg", "--json").stdout)
    assert (described["group"], described["type"]) == ("sg", "share")


def test_flags_alone_and_flags_over_the_file(secured: Secured, tmp_path: Path) -> None:
    flags = ["--security-protocol", "SASL_SSL", "--sasl-mechanism", "SCRAM-SHA-512",
             "--sasl-username", "alice", "--sasl-password", PASSWORD,
             "--ssl-cafile", str(secured.pki.ca)]
    assert kc(secured, "SASL_SSL", "cluster", "info", *flags, config=False).stdout
    alice = secured.pki.clients["alice"]
    assert kc(secured, "SSL", "cluster", "info", "--security-protocol", "SSL",
              "--ssl-cafile", str(secured.pki.ca), "--ssl-certfile", str(alice.chain),
              "--ssl-keyfile", str(alice.key), config=False).stdout
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(secured.configs["SASL_SSL"].read_text().replace(PASSWORD, "wrong"))
    assert kc(secured, "SASL_SSL", "topics", "list", "--command-config", str(wrong),
              "--sasl-password", PASSWORD, config=False).returncode == 0


@pytest.mark.parametrize("command", [("topics", "list"), ("produce", "any-topic"),
                                     ("groups", "describe", "sg")])
def test_a_wrong_password_is_one_line_with_the_brokers_message(
        secured: Secured, command: tuple[str, ...]) -> None:
    err = kc(secured, "SASL_SSL", *command, "--sasl-password", "wrong", stdin="x\n",
             expect=1).stderr
    assert err.strip() == (
        f"kcompat: error: {secured.server('SASL_SSL')}: SASL_AUTHENTICATION_FAILED: "
        "Authentication failed during authentication due to invalid credentials with SASL "
        "mechanism SCRAM-SHA-512")


def test_tls_failures_name_the_cause(secured: Secured) -> None:
    no_cert = kc(secured, "SSL", "topics", "list", "--security-protocol", "SSL",
                 "--ssl-cafile", str(secured.pki.ca), config=False, expect=1).stderr
    assert no_cert.strip() == (
        f"kcompat: error: TLS failure with {secured.server('SSL')}: tlsv13 alert certificate "
        "required (no client certificate was given: ssl.keystore.location or --ssl-certfile)")
    stranger = secured.pki.untrusted
    refused = kc(secured, "SSL", "topics", "list", "--security-protocol", "SSL",
                 "--ssl-cafile", str(secured.pki.ca), "--ssl-certfile", str(stranger.chain),
                 "--ssl-keyfile", str(stranger.key), config=False, expect=1).stderr
    assert refused.strip() == (
        f"kcompat: error: TLS failure with {secured.server('SSL')}: tlsv1 alert unknown ca")
    untrusted = kc(secured, "SASL_SSL", "topics", "list", "--security-protocol", "SASL_SSL",
                   "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", "alice",
                   "--sasl-password", PASSWORD, config=False, expect=1).stderr
    assert (f"TLS handshake with {secured.server('SASL_SSL')} failed: certificate verify "
            "failed: self-signed certificate in certificate chain") in untrusted
    plain_port = kc(secured, "PLAINTEXT", "topics", "list", "--command-config",
                    str(secured.configs["SSL"]), expect=1).stderr
    assert "(is it a TLS listener?)" in plain_port


def test_an_unsupported_key_is_named(secured: Secured, tmp_path: Path) -> None:
    conf = tmp_path / "jks.properties"
    conf.write_text("security.protocol=SSL\nssl.truststore.location=/etc/kafka/ts.jks\n"
                    "ssl.truststore.password=changeit\n")
    err = kc(secured, "SSL", "topics", "list", "--command-config", str(conf), config=False,
             expect=2).stderr
    assert err.strip() == (f"kcompat: error: {conf}: ssl.truststore.type: JKS (Kafka's default) "
                           "stores are not supported: kcompat's CLI reads PEM files "
                           "(set ssl.truststore.type=PEM)")


def test_a_kio_connection_logs_in_afresh_before_its_session_ends(secured: Secured) -> None:
    """KIP-368: the broker grants a session of connections.max.reauth.ms and closes
    a connection whose session has ended; the CLI's own connections dial again
    before that (at 85 % of it) instead of losing a request."""
    security = ClientSecurity(protocol="SASL_PLAINTEXT", mechanism="SCRAM-SHA-512",
                              username="alice", password=PASSWORD)
    conn = Connection("127.0.0.1", secured.ports["SHORT"], 10, security)
    request = metadata.MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                       include_topic_authorized_operations=False)
    try:
        first_socket = conn.sock
        assert conn.call(request).brokers
        assert conn.sock is first_socket
        session_ends = conn._session_ends
        assert session_ends is not None
        while time.monotonic() < session_ends + REAUTH_MS * 0.2 / 1000:
            time.sleep(0.05)  # past the session's end: the broker closes the old socket
        assert [b.port for b in conn.call(request).brokers] == [secured.ports["SHORT"]]
        assert conn.sock is not first_socket  # a new connection, logged in again
    finally:
        conn.close()
