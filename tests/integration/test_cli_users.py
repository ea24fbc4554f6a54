"""``kcompat users add|remove|list`` against a real broker process: the credentials
the CLI creates (salted on the client, as kafka-configs.sh does) let
kafka-python log in with SASL/SCRAM on the broker's SASL_PLAINTEXT listener
(a wrong password, an unknown user and a missing mechanism are refused with
Kafka's one message), Kafka's refusals of bad alterations come back as
one-line errors, and the credentials live in the
metadata log: they survive a restart."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
import yaml
from kafka import KafkaConsumer
from kafka.net.sasl.scram import ScramClient
from kio.schema.sasl_authenticate.v2 import request as sa
from kio.schema.sasl_handshake.v1 import request as sh

from compat_tests._broker import Broker, free_port
from kcompat.cli._kio import Connection

pytestmark = pytest.mark.timeout(120)

SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """PLAINTEXT for the CLI, SASL_PLAINTEXT with both SCRAM mechanisms for logins."""
    workdir = tmp_path_factory.mktemp("users")
    plain, sasl = free_port(), free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}"
    config = workdir / "broker.yaml"
    config.write_text(yaml.safe_dump({
        "listeners": listeners, "advertised.listeners": listeners,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": f"{SCRAM_MODULE} required;",
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": f"{SCRAM_MODULE} required;",
    }))
    b = Broker(workdir / "broker", port=plain,
               extra_args=("--admin-port", "-1", "--config", str(config)))
    b.sasl_port = sasl  # type: ignore[attr-defined]
    b.start()
    try:
        yield b
    finally:
        b.close()


def users(broker: Broker, *args: str, expect: int = 0,
          stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "kcompat", "users", *args,
                           "--bootstrap-server", broker.bootstrap],
                          capture_output=True, text=True, timeout=60, input=stdin)
    assert proc.returncode == expect, (args, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    return proc


def listed(broker: Broker, *names: str) -> list[tuple[str, str, int]]:
    return [(x["user"], x["mechanism"], x["iterations"])
            for x in json.loads(users(broker, "list", *names, "--json").stdout)]


def logs_in(broker: Broker, user: str, password: str, mechanism: str) -> bool:
    """kafka-python connects over SASL_PLAINTEXT and fetches metadata."""
    consumer = KafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{broker.sasl_port}",  # type: ignore[attr-defined]
        security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
        sasl_plain_username=user, sasl_plain_password=password, request_timeout_ms=5000)
    try:
        return isinstance(consumer.topics(), set)
    finally:
        consumer.close()


def refused(broker: Broker, user: str, password: str, mechanism: str) -> tuple[str, str | None]:
    """One SCRAM exchange by hand (SaslHandshake v1, SaslAuthenticate v2) with
    kafka-python's ScramClient messages (kafka-python itself retries a refused
    login for ever): the error the broker answers."""
    conn = Connection("127.0.0.1", broker.sasl_port, 10)  # type: ignore[attr-defined]
    try:
        assert conn.call(sh.SaslHandshakeRequest(mechanism=mechanism)).error_code.name == "none"
        client = ScramClient(user, password, mechanism)
        first = conn.call(sa.SaslAuthenticateRequest(auth_bytes=client.first_message()))
        if first.error_code.name != "none":
            return first.error_code.name, first.error_message
        client.process_server_first_message(first.auth_bytes)
        final = conn.call(sa.SaslAuthenticateRequest(auth_bytes=client.final_message()))
        return final.error_code.name, final.error_message
    finally:
        conn.close()


def _failure(mechanism: str) -> tuple[str, str]:
    return ("sasl_authentication_failed", "Authentication failed during authentication due "
            f"to invalid credentials with SASL mechanism {mechanism}")


def test_add_list_log_in_remove(broker: Broker) -> None:
    out = users(broker, "add", "alice", "--password", "alice-secret", "--iterations", "8192")
    assert out.stdout.strip() == "added 1 SCRAM credential(s) of user 'alice': SCRAM-SHA-512"
    added = json.loads(users(broker, "add", "bob,=x", "--password", "-", "--mechanism",
                             "scram-sha-256", "--mechanism", "SCRAM-SHA-512", "--json",
                             stdin="bob-secret\n").stdout)
    assert added == {"added": [
        {"user": "bob,=x", "mechanism": "SCRAM-SHA-256", "iterations": 4096},
        {"user": "bob,=x", "mechanism": "SCRAM-SHA-512", "iterations": 4096}]}
    assert listed(broker) == [("alice", "SCRAM-SHA-512", 8192), ("bob,=x", "SCRAM-SHA-256", 4096),
                              ("bob,=x", "SCRAM-SHA-512", 4096)]
    table = users(broker, "list", "alice").stdout.splitlines()
    assert table[0].split() == ["USER", "MECHANISM", "ITERATIONS"]
    assert table[1].split() == ["alice", "SCRAM-SHA-512", "8192"]

    assert logs_in(broker, "alice", "alice-secret", "SCRAM-SHA-512")
    assert refused(broker, "alice", "wrong", "SCRAM-SHA-512") == _failure("SCRAM-SHA-512")
    assert refused(broker, "alice", "alice-secret", "SCRAM-SHA-256") == _failure("SCRAM-SHA-256")
    assert refused(broker, "nobody", "x", "SCRAM-SHA-512") == _failure("SCRAM-SHA-512")
    assert refused(broker, "alice", "alice-secret", "SCRAM-SHA-512") == ("none", None)

    # a new password replaces the old one
    users(broker, "add", "alice", "--password", "changed", "--iterations", "4096")
    assert listed(broker, "alice") == [("alice", "SCRAM-SHA-512", 4096)]
    assert logs_in(broker, "alice", "changed", "SCRAM-SHA-512")
    assert refused(broker, "alice", "alice-secret", "SCRAM-SHA-512") == _failure("SCRAM-SHA-512")

    assert "SCRAM-SHA-256" in users(broker, "remove", "bob,=x", "--mechanism",
                                    "SCRAM-SHA-256").stdout
    assert listed(broker, "bob,=x") == [("bob,=x", "SCRAM-SHA-512", 4096)]
    users(broker, "remove", "bob,=x")  # every credential it has left
    assert [u for u, _, _ in listed(broker)] == ["alice"]


def test_refusals_are_kafkas(broker: Broker) -> None:
    err = users(broker, "add", "carol", "--password", "pw", "--iterations", "100", expect=1).stderr
    assert "Too few iterations" in err and "carol" in err
    err = users(broker, "add", "carol", "--password", "pw", "--iterations", "20000",
                expect=1).stderr
    assert "Too many iterations" in err
    err = users(broker, "add", "", "--password", "pw", expect=1).stderr
    assert "Username must not be empty" in err
    err = users(broker, "remove", "carol", "--mechanism", "SCRAM-SHA-512", expect=1).stderr
    assert "Attempt to delete a user credential that does not exist" in err
    err = users(broker, "list", "carol", expect=1).stderr
    assert "Attempt to describe a user credential that does not exist: carol" in err
    assert "--mechanism" in users(broker, "add", "carol", "--password", "pw", "--mechanism",
                                  "PLAIN", expect=2).stderr
    assert "carol" not in [u for u, _, _ in listed(broker)]


def test_credentials_survive_a_restart(broker: Broker) -> None:
    users(broker, "add", "dave", "--password", "dave-secret", "--mechanism", "SCRAM-SHA-256")
    before = listed(broker)
    assert ("dave", "SCRAM-SHA-256", 4096) in before
    broker.restart()
    assert listed(broker) == before
    assert logs_in(broker, "dave", "dave-secret", "SCRAM-SHA-256")
