"""Brokers with secured listeners, and the real clients that talk to them.

Theory of operation
-------------------
Issue 17: the same Kafka config keys must secure kcompat and Apache Kafka, so
``security_config`` is the one place they are written, and both targets are
started from it — the reference Kafka (``KafkaReference``, its PLAINTEXT
inter-broker and CONTROLLER listeners added) and a kcompat broker (the keys in a
YAML ``--config`` file). Four listeners, each named after its protocol:

- ``SASL_SSL``: TLS, then SASL SCRAM-SHA-512 (users in the metadata log);
- ``SSL``: TLS with ``ssl.client.auth=required`` for this listener only
  (``listener.name.ssl.`` prefix: SASL_SSL clients bring no certificate), the
  principal from the certificate (``ssl.principal.mapping.rules`` keeps the CN;
  nothing observes it until ACLs come);
- ``SASL_PLAINTEXT``: SASL PLAIN with JAAS users (``user_<name>="<password>"``);
- ``PLAINTEXT``: for the tests' own set-up (create topics, read group offsets).

``SecuredTarget.round_trip`` runs one client in its own process over one of
them: kafka-python, confluent-kafka and aiokafka through
``compat_tests._secured_client``, kcat (``-P``, then ``-G``), and the Java
clients (``Produce`` beside ``GroupConsumer`` of ``compat_tests/java/clients``).
Each produces ``count`` records and reads them back in a consumer group, and
returns an ``Outcome``: what was consumed, or the client's own error.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from compat_tests._broker import REPO_ROOT, Broker, free_port
from compat_tests._secured_client import ClientSecurity, RoundTrip
from compat_tests._tls import TestPki
from compat_tests.java.conftest import PKG, JsonLineProcess, java_cmd, run_java
from compat_tests.java.kafka_reference import KafkaReference

HOST = "127.0.0.1"
LISTENERS = ("PLAINTEXT", "SASL_SSL", "SSL", "SASL_PLAINTEXT")
SCRAM = "SCRAM-SHA-512"
USER, PASSWORD = "alice", "alice-secret"
CLIENT_TIMEOUT_S = 25.0
REFUSED_BLOCK_S = 8.0
KCAT = shutil.which("kcat") or "/usr/bin/kcat"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def security_config(ports: dict[str, int], pki: TestPki) -> dict[str, str]:
    """The Kafka keys of the four listeners (module docstring), for both targets."""
    return {
        "listeners": ",".join(f"{name}://{HOST}:{ports[name]}" for name in LISTENERS),
        "advertised.listeners": ",".join(f"{n}://{HOST}:{ports[n]}" for n in LISTENERS),
        "listener.security.protocol.map": ",".join(f"{n}:{n}" for n in LISTENERS),
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": SCRAM,
        f"listener.name.sasl_ssl.{SCRAM.lower()}.sasl.jaas.config": f"{SCRAM_MODULE} required;",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            f'{PLAIN_MODULE} required user_{USER}="{PASSWORD}";',
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server.keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),.*$/$1/,DEFAULT",
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "1",
    }


@dataclass
class Outcome:
    """What one client did: the values it consumed, or its error (``error`` is
    the client's own words: exception class and message, or kcat's stderr)."""

    client: str
    consumed: list[str] = field(default_factory=list)
    error: str | None = None
    log: str = ""

    def explain(self) -> str:
        return f"{self.client}: error={self.error!r}\n{self.log[-3000:]}"


@dataclass
class SecuredTarget:
    """A running broker (``name`` kafka or kcompat) with the four listeners."""

    name: str
    ports: dict[str, int]
    pki: TestPki
    workdir: Path

    def bootstrap(self, listener: str) -> str:
        return f"{HOST}:{self.ports[listener]}"

    def security(self, listener: str, *, user: str = USER, password: str = PASSWORD,
                 client_cert: str | None = "alice", mechanism: str | None = None
                 ) -> ClientSecurity:
        """How a client connects to ``listener``; ``client_cert`` names the
        certificate an SSL client presents (None: none, ``stranger``: one of an
        untrusted CA)."""
        ca = str(self.pki.ca)
        if listener == "SASL_SSL":
            return ClientSecurity("SASL_SSL", mechanism or SCRAM, user, password, ca=ca)
        if listener == "SASL_PLAINTEXT":
            return ClientSecurity("SASL_PLAINTEXT", mechanism or "PLAIN", user, password)
        if listener == "SSL":
            if client_cert is None:
                return ClientSecurity("SSL", ca=ca)
            ident = (self.pki.untrusted if client_cert == self.pki.untrusted.name
                     else self.pki.clients[client_cert])
            return ClientSecurity("SSL", ca=ca, cert=str(ident.chain), key=str(ident.key),
                                  keystore=str(ident.keystore))
        return ClientSecurity("PLAINTEXT")

    def round_trip(self, client: str, listener: str, sec: ClientSecurity, topic: str,
                   group: str, count: int, clients_cp: str = "", *,
                   refused: bool = False) -> Outcome:
        """One client's produce-then-consume over ``listener``; ``refused``: the
        login is expected to fail (``RoundTrip.refused``)."""
        rt = RoundTrip(client, self.bootstrap(listener), topic, group, count, sec,
                       CLIENT_TIMEOUT_S, refused)
        if client == "kcat":
            return kcat_round_trip(rt, self.workdir)
        if client == "java":
            return java_round_trip(rt, clients_cp)
        return python_round_trip(rt)


def python_round_trip(rt: RoundTrip) -> Outcome:
    cp = subprocess.run([sys.executable, "-m", "compat_tests._secured_client", rt.to_json()],
                        capture_output=True, text=True, cwd=str(REPO_ROOT),
                        timeout=3 * rt.timeout_s + 30, stdin=subprocess.DEVNULL)
    log = f"exit {cp.returncode}\nstdout:\n{cp.stdout[-3000:]}\nstderr:\n{cp.stderr[-3000:]}"
    lines = [json.loads(x) for x in cp.stdout.splitlines() if x.startswith("{")]
    if not lines:
        return Outcome(rt.client, error=f"no result line (exit {cp.returncode})", log=log)
    last = lines[-1]
    if last["event"] == "error":
        client_log = "".join(f"\n  {line}" for line in last["log"])
        return Outcome(rt.client, error=f"{last['type']}: {last['message']}{client_log}",
                       log=log)
    return Outcome(rt.client, consumed=last["consumed"], log=log)


def _kcat(rt: RoundTrip, home: Path, *args: str, stdin: str | None = None
          ) -> subprocess.CompletedProcess[str]:
    conf = [a for k, v in rt.security.librdkafka().items() for a in ("-X", f"{k}={v}")]
    env = {**os.environ, "HOME": str(home)}
    env.pop("KCAT_CONFIG", None)
    env.pop("KAFKACAT_CONFIG", None)
    cmd = [KCAT, "-b", rt.bootstrap, "-X", "client.id=kcat", *conf, *args]
    try:
        return subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env,
                              timeout=rt.timeout_s + 10)
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        return subprocess.CompletedProcess(cmd, -9, "", f"timed out; stderr: {err}")


def kcat_round_trip(rt: RoundTrip, home: Path) -> Outcome:
    """kcat -P (librdkafka's default acks=all; kcat exits non-zero when a
    delivery fails), then kcat -G until ``count`` records (it commits on exit)."""
    timeout_ms = str(int(rt.timeout_s * 1000))
    produced = _kcat(rt, home, "-P", "-t", rt.topic, "-X", f"message.timeout.ms={timeout_ms}",
                     stdin="".join(f"{v}\n" for v in rt.expected()))
    log = f"kcat -P exit {produced.returncode}: {produced.stderr[-2000:]}"
    if produced.returncode != 0:
        return Outcome("kcat", error=produced.stderr.strip()[-2000:], log=log)
    consumed = _kcat(rt, home, "-G", rt.group, "-o", "beginning", "-c", str(rt.count),
                     "-q", "-f", "%s\\n", rt.topic)
    log += f"\nkcat -G exit {consumed.returncode}: {consumed.stderr[-2000:]}"
    if consumed.returncode != 0:
        return Outcome("kcat", error=consumed.stderr.strip()[-2000:], log=log)
    return Outcome("kcat", consumed=consumed.stdout.splitlines(), log=log)


def java_round_trip(rt: RoundTrip, clients_cp: str) -> Outcome:
    """``Produce`` (a default, idempotent producer) and one ``GroupConsumer``
    member, side by side (two JVMs starting at once), until the member has
    committed ``count`` records; a login expected to be refused runs Produce only."""
    extra = [f"{k}={v}" for k, v in rt.security.java().items()]
    member = None if rt.refused else JsonLineProcess(subprocess.Popen(
        java_cmd(clients_cp, f"{PKG}.GroupConsumer", rt.bootstrap, rt.topic, rt.group,
                 "secured-java", *extra),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    # a refused login ends Produce at once (SaslAuthenticationException,
    # SslAuthenticationException); a broker that only closes the connection
    # leaves each send() waiting for metadata until max.block.ms
    block_ms = int(1000 * (REFUSED_BLOCK_S if rt.refused else rt.timeout_s))
    with _stopping(member):
        try:
            produced = run_java(clients_cp, f"{PKG}.Produce", rt.bootstrap, rt.topic,
                                str(rt.count), f"max.block.ms={block_ms}", *extra,
                                timeout=rt.timeout_s + 30)
        except subprocess.TimeoutExpired as exc:
            return Outcome("java", error=f"Produce did not finish in {exc.timeout:.0f}s")
        log = produced.explain()
        # the sends waiting for metadata when the login failed end with the
        # login's exception, those that waited longer than max.block.ms before
        # with a TimeoutException: the former says why
        failed = sorted((ev["error"] for ev in produced.json_lines() if ev["event"] == "failed"),
                        key=lambda err: err["exception"] == "TimeoutException")
        if failed:
            err = failed[0]
            return Outcome("java", error=f"{err['exception']}: {err['message']}", log=log)
        if produced.returncode != 0 or member is None:
            return Outcome("java", error=f"Produce exited {produced.returncode}", log=log)
        keys, error = _consumed_keys(member, rt.count, time.monotonic() + rt.timeout_s)
    log += f"\n--- GroupConsumer stderr ---\n{member.stderr[-3000:]}"
    # Produce keys its records k0..k<n-1>: give them back as the values they stand for
    return Outcome("java", consumed=[f"{rt.topic}-{k[1:]}" for k in keys], error=error, log=log)


def _consumed_keys(member: JsonLineProcess, count: int, deadline: float
                   ) -> tuple[list[str], str | None]:
    """The keys a GroupConsumer printed until it committed ``count`` records, and
    its error (None once it did)."""
    keys: list[str] = []
    committed = 0
    while committed < count:
        if time.monotonic() > deadline:
            return keys, f"GroupConsumer committed {committed} of {count} records in time"
        ev = _next_event(member)
        if ev is None:
            if member.proc.poll() is not None:
                return keys, f"GroupConsumer exited {member.proc.returncode}"
        elif ev["event"] == "record":
            keys.append(str(ev["key"]))
        elif ev["event"] == "committed":
            committed += int(ev["count"])  # type: ignore[call-overload]
        elif ev["event"] == "error":
            err = ev["error"]
            assert isinstance(err, dict)
            return keys, f"{err['exception']}: {err['message']}"
    return keys, None


def _next_event(member: JsonLineProcess) -> dict[str, object] | None:
    import queue
    try:
        return member.events.get(timeout=0.2)
    except queue.Empty:
        return None


@contextlib.contextmanager
def _stopping(member: JsonLineProcess | None) -> Iterator[None]:
    try:
        yield
    finally:
        if member is not None:
            _stop(member)


def _stop(member: JsonLineProcess) -> None:
    """A "stop" line makes GroupConsumer leave the group and exit."""
    with contextlib.suppress(OSError, ValueError):
        assert member.proc.stdin is not None
        member.proc.stdin.write("stop\n")
        member.proc.stdin.close()
    try:
        member.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        member.proc.kill()
        member.proc.wait()


# -- the two targets -------------------------------------------------------------------


def _ports() -> dict[str, int]:
    return {name: free_port(HOST) for name in LISTENERS}


@contextlib.contextmanager
def kafka_target(workdir: Path, pki: TestPki) -> Iterator[SecuredTarget]:
    """Apache Kafka 4.4 with the four listeners plus its CONTROLLER one; the SCRAM
    user is bootstrapped into the metadata log by ``kafka-storage format``."""
    ports = _ports()
    controller_port = free_port(HOST)
    props = security_config(ports, pki)
    props["listeners"] += f",CONTROLLER://{HOST}:{controller_port}"
    props["listener.security.protocol.map"] += ",CONTROLLER:PLAINTEXT"
    ref = KafkaReference(workdir / "kafka", port=ports["PLAINTEXT"],
                         controller_port=controller_port, overrides=props,
                         format_args=("--add-scram",
                                      f"{SCRAM}=[name={USER},password={PASSWORD}]"))
    ref.start()
    try:
        yield SecuredTarget("kafka", ports, pki, workdir)
    finally:
        ref.close()


@contextlib.contextmanager
def kcompat_target(workdir: Path, pki: TestPki) -> Iterator[SecuredTarget]:
    """A kcompat broker given the same keys in its YAML ``--config``; the SCRAM
    user is created with AlterUserScramCredentials over the PLAINTEXT listener."""
    ports = _ports()
    config = workdir / "kcompat-secured.yaml"
    config.write_text(yaml.safe_dump(security_config(ports, pki), sort_keys=True))
    broker = Broker(workdir / "kcompat", port=ports["PLAINTEXT"],
                    extra_args=("--config", str(config)))
    broker.start()
    try:
        add_scram_user(broker.bootstrap, USER, PASSWORD)
        yield SecuredTarget("kcompat", ports, pki, workdir)
    finally:
        broker.close()


def add_scram_user(bootstrap: str, user: str, password: str) -> None:
    """KIP-554's AlterUserScramCredentials through confluent-kafka's admin; then
    DescribeUserScramCredentials must list the user."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, info, password.encode())])
    for f in futures.values():
        f.result(timeout=CLIENT_TIMEOUT_S)
    described = admin.describe_user_scram_credentials([user])
    assert described[user].result(timeout=CLIENT_TIMEOUT_S).scram_credential_infos, described
