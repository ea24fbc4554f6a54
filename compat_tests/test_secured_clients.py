"""Real clients over secured listeners (issue 17), against Apache Kafka 4.4 and kcompat.

Each client — kafka-python, confluent-kafka, aiokafka, kcat and the Java clients,
every one in its own process — produces a few records and reads them back in a
consumer group, over SASL_SSL with SCRAM-SHA-512, over SSL with a client
certificate (mTLS) and over SASL_PLAINTEXT with PLAIN
(``compat_tests/_secured_listeners.py`` has the listeners and the one set of
Kafka config keys both brokers are started with). Then each is refused as the
broker must refuse it: a wrong password, an unknown user, no client certificate
where one is required, a certificate of a CA the broker does not trust — and the
client reports its own authentication or TLS error.

One target per module (``target``): the reference Kafka starts once (about 10 s),
the PKI is made at test time (``compat_tests/_tls.py``). What the clients taught
us is in REFUSED's notes and in test_kcat_scram_is_refused_as_by_kafka_4.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from kafka import KafkaAdminClient

from compat_tests._broker import unique_topic
from compat_tests._groups import create_topic, unique_group, wait_for
from compat_tests._secured_listeners import (
    PASSWORD,
    Outcome,
    SecuredTarget,
    kafka_target,
    kcompat_target,
)
from compat_tests._tls import UNTRUSTED_NAME, TestPki
from compat_tests.java._jvm import clients_classpath

pytestmark = pytest.mark.timeout(120)

CLIENTS = ("kafka-python", "confluent", "aiokafka", "kcat", "java")
SECURED = ("SASL_SSL", "SSL", "SASL_PLAINTEXT")
COUNT = 5
TARGETS = (
    pytest.param("kafka", id="kafka"),
    pytest.param("kcompat", id="kcompat"),
)

#: How each client reports a login the broker refused, by kind: "sasl" (wrong
#: password, unknown user: SaslAuthenticate answers SASL_AUTHENTICATION_FAILED
#: and the broker closes the connection) and "tls" (no or untrusted client
#: certificate: a TLS alert, which under TLS 1.3 comes after the client's side of
#: the handshake is done).
REFUSED = {
    # kafka-python 3.0.12 sees Kafka close the connection right after the
    # SaslAuthenticate answer and reports the disconnect, not the answer: a
    # disconnect once ApiVersions was answered (its broker_version is known).
    ("kafka-python", "sasl"): r"SaslAuthenticationFailedError|broker_version=\(\d+, \d+\) "
                              r"\(disconnected\)>: Connection lost: "
                              r"KafkaConnectionError: socket disconnected",
    ("kafka-python", "tls"): r"KafkaConnectionError: \[SSL: [A-Z0-9_]*ALERT",
    ("confluent", "sasl"): r"KafkaError\{code=_AUTHENTICATION,.*SASL authentication error",
    ("confluent", "tls"): r"KafkaError\{code=_(TRANSPORT|SSL),.*alert",
    ("aiokafka", "sasl"): r"\[Error 58\] SaslAuthenticationFailed",
    # aiokafka logs only that the connection was closed: its TLS 1.3 handshake
    # had finished before the broker checked the certificate.
    ("aiokafka", "tls"): r"Unable connect to .*: KafkaConnectionError: Connection at .* closed",
    ("kcat", "sasl"): r"ERROR: Local: Authentication failure: .*SASL authentication error",
    ("kcat", "tls"): r"ERROR: Local: Broker transport failure: .*alert",
    ("java", "sasl"): r"^SaslAuthenticationException: ",
    ("java", "tls"): r"^SslAuthenticationException: ",
}


@pytest.fixture(scope="module", params=TARGETS)
def target(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredTarget]:
    workdir = tmp_path_factory.mktemp(f"secured-{request.param}")
    pki = TestPki.create(workdir / "pki")
    start = kafka_target if request.param == "kafka" else kcompat_target
    with start(workdir, pki) as t:
        yield t


@pytest.fixture(scope="module")
def java_cp() -> str:
    return clients_classpath()


def _cp(client: str, request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("java_cp")) if client == "java" else ""


def group_offsets(bootstrap: str, group: str) -> dict[int, int]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    try:
        res = admin.list_group_offsets({group: None})
    finally:
        admin.close()
    return {tp.partition: om.offset for tp, om in res.get(group, {}).items()}


def side_by_side(check: Callable[[str], str | None], cases: Iterable[str]) -> list[str]:
    """``check`` of every case in threads at once (each waits on its own client
    processes); the problems found."""
    cases = list(cases)
    with ThreadPoolExecutor(len(cases)) as pool:
        return [p for p in pool.map(check, cases) if p is not None]


def _round_trip(target: SecuredTarget, client: str, listener: str, cp: str) -> str | None:
    """None if ``client`` produced and consumed back in a group over ``listener``
    and the group's committed offset is the end; else what went wrong."""
    topic, group = unique_topic(f"sec-{client}-{listener}"), unique_group(f"sec-{client}")
    create_topic(target.bootstrap("PLAINTEXT"), topic, 1)
    out = target.round_trip(client, listener, target.security(listener), topic, group,
                            COUNT, cp)
    want = [f"{topic}-{i}" for i in range(COUNT)]
    if out.error is not None or sorted(out.consumed) != want:
        return f"{listener}: consumed {out.consumed}, expected {want}\n{out.explain()}"
    try:  # what the member committed, as the broker's PLAINTEXT listener reports it
        wait_for(lambda: group_offsets(target.bootstrap("PLAINTEXT"), group) == {0: COUNT},
                 15, lambda: f"group {group} committed "
                             f"{group_offsets(target.bootstrap('PLAINTEXT'), group)}, "
                             f"expected {{0: {COUNT}}}")
    except AssertionError as exc:
        return f"{listener}: {exc}"
    return None


@pytest.mark.parametrize("client", CLIENTS)
def test_round_trips_in_a_group(target: SecuredTarget, client: str,
                                request: pytest.FixtureRequest) -> None:
    """Over each secured listener, side by side (a topic and a group each). Not
    kcat over SASL_SSL: test_kcat_scram_is_refused_as_by_kafka_4."""
    cp = _cp(client, request)
    listeners = [lst for lst in SECURED if not (client == "kcat" and lst == "SASL_SSL")]
    problems = side_by_side(lambda lst: _round_trip(target, client, lst, cp), listeners)
    assert not problems, f"{client} on {target.name}:\n" + "\n".join(problems)


#: case -> (listener, ClientSecurity overrides, kind of refusal)
REFUSALS = {
    "scram-wrong-password": ("SASL_SSL", {"password": "not-" + PASSWORD}, "sasl"),
    "plain-unknown-user": ("SASL_PLAINTEXT", {"user": "mallory"}, "sasl"),
    "no-client-cert": ("SSL", {"client_cert": None}, "tls"),
    "untrusted-client-cert": ("SSL", {"client_cert": UNTRUSTED_NAME}, "tls"),
}


def _refused(target: SecuredTarget, client: str, case: str, cp: str) -> str | None:
    """None if ``client`` was refused in ``case`` with its own error; else why not."""
    listener, overrides, kind = REFUSALS[case]
    topic = unique_topic(f"refused-{client}-{case}")
    sec = target.security(listener, **overrides)  # type: ignore[arg-type]
    out: Outcome = target.round_trip(client, listener, sec, topic, unique_group("refused"),
                                     COUNT, cp, refused=True)
    if out.error is None:
        return f"{case}: {client} was let in and consumed {out.consumed}"
    if out.consumed:
        return f"{case}: {client} consumed {out.consumed} before failing"
    if not re.search(REFUSED[(client, kind)], out.error, re.MULTILINE):
        return (f"{case}: {client} failed, but not with its {kind} refusal "
                f"/{REFUSED[(client, kind)]}/:\n{out.explain()}")
    return None


@pytest.mark.parametrize("client", CLIENTS)
def test_bad_credentials_are_refused(target: SecuredTarget, client: str,
                                     request: pytest.FixtureRequest) -> None:
    """Every refusal case of REFUSALS for one client, side by side (kafka-python
    waits out its bootstrap timeout in each)."""
    cp = _cp(client, request)
    problems = side_by_side(lambda case: _refused(target, client, case, cp), REFUSALS)
    assert not problems, f"on {target.name}:\n" + "\n".join(problems)


def test_kcat_scram_is_refused_as_by_kafka_4(target: SecuredTarget) -> None:
    """Debian's kcat links librdkafka 2.0.2, whose SCRAM client-final-message
    repeats the client nonce after the server's combined nonce (fixed in
    librdkafka 2.6.1). Kafka 4.x compares the nonce strictly (RFC 5802) and
    refuses the right password; a broker that accepted it would not check the
    nonce. confluent-kafka's own librdkafka (2.6.1 or later) logs in above."""
    topic = unique_topic("kcat-scram")
    out = target.round_trip("kcat", "SASL_SSL", target.security("SASL_SSL"), topic,
                            unique_group("kcat-scram"), COUNT, refused=True)
    assert out.error is not None and not out.consumed, out.explain()
    assert re.search(REFUSED[("kcat", "sasl")], out.error), out.explain()
    assert "invalid credentials" in out.error, out.explain()
