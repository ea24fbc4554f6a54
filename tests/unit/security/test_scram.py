"""SCRAM's server side driven by a real client (kafka-python's ScramClient),
RFC 7677's test vector, and bad input."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.admin import ScramMechanism, UserScramCredentialUpsertion
from kafka.net.sasl.scram import ScramClient

from kcompat.security import scram
from kcompat.security.sasl import SCRAM_SHA_256, SCRAM_SHA_512, SaslError
from kcompat.security.scram import ScramCredential, ScramFailure, ScramServer

MECHANISMS = [SCRAM_SHA_256, SCRAM_SHA_512]
SERVER_NONCE = "k3x9q0c5w2m8y7r1t4u6"


def _credential(mechanism: str, user: str, password: str, iterations: int = 4096
                ) -> ScramCredential:
    """Derived from what kafka-python's admin client would send (AlterUserScramCredentials)."""
    up = UserScramCredentialUpsertion(user, ScramMechanism[mechanism.replace("-", "_")],
                                      password, iterations=iterations)
    return scram.credential_from_salted(mechanism, up.salt, up.salted_password, iterations)


def _server(mechanism: str, users: dict[str, ScramCredential], **kw: bool) -> ScramServer:
    return ScramServer(mechanism, users.get, SERVER_NONCE, **kw)


def _failure(mechanism: str) -> str:
    return ("Authentication failed during authentication due to invalid credentials with "
            f"SASL mechanism {mechanism}")


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_real_client_authenticates_and_verifies_the_server(mechanism: str) -> None:
    server = _server(mechanism, {"alice": _credential(mechanism, "alice", "s3cret")})
    client = ScramClient("alice", "s3cret", mechanism)
    server_first = server.step(client.first_message())
    assert server_first.startswith(b"r=" + client.nonce + SERVER_NONCE.encode() + b",s=")
    assert server_first.endswith(b",i=4096")
    assert not server.complete and server.authorization_id == ""
    client.process_server_first_message(server_first)
    server_final = server.step(client.final_message())
    client.process_server_final_message(server_final)  # raises on a wrong server signature
    assert server_final.startswith(b"v=")
    assert server.complete and server.authorization_id == "alice"
    assert server.mechanism == mechanism


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_the_stored_keys_are_the_clients_own(mechanism: str) -> None:
    """Kafka's ScramFormatter: stored = H(HMAC(salted, "Client Key")), server =
    HMAC(salted, "Server Key") — the keys the real client computes."""
    cred = _credential(mechanism, "bob", "pw", iterations=8192)
    client = ScramClient("bob", "pw", mechanism)
    server = _server(mechanism, {"bob": cred})
    client.process_server_first_message(server.step(client.first_message()))
    assert (client.stored_key, client.server_key) == (cred.stored_key, cred.server_key)
    assert cred.iterations == 8192
    assert "stored_key" not in repr(cred) and "salt" not in repr(cred)


def test_rfc7677_test_vector() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    salted = scram.salted_password(SCRAM_SHA_256, b"pencil", salt, 4096)
    cred = scram.credential_from_salted(SCRAM_SHA_256, salt, salted, 4096)
    server = ScramServer(SCRAM_SHA_256, {"user": cred}.get, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    assert server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,"
        b"i=4096")
    assert server.step(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                       b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=") == (
        b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


@pytest.mark.parametrize("name", ["a,b", "x=y", "=2C", ",=,"])
def test_escaped_usernames(name: str) -> None:
    """The client sends the saslname (``=2C``, ``=3D``); the user is the unescaped name."""
    assert scram.username(scram.sasl_name(name)) == name
    server = _server(SCRAM_SHA_512, {name: _credential(SCRAM_SHA_512, name, "pw")})
    client = ScramClient(scram.sasl_name(name), "pw", SCRAM_SHA_512)
    client.process_server_first_message(server.step(client.first_message()))
    client.process_server_final_message(server.step(client.final_message()))
    assert server.authorization_id == name


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_wrong_password_and_unknown_user_read_the_same(mechanism: str) -> None:
    users = {"alice": _credential(mechanism, "alice", "right")}
    server = _server(mechanism, users)
    client = ScramClient("alice", "wrong", mechanism)
    client.process_server_first_message(server.step(client.first_message()))
    with pytest.raises(ScramFailure) as wrong:
        server.step(client.final_message())
    assert str(wrong.value) == _failure(mechanism)
    assert "wrong password" in wrong.value.reason
    assert not server.complete and server.authorization_id == ""

    with pytest.raises(ScramFailure) as unknown:
        _server(mechanism, users).step(ScramClient("mallory", "x", mechanism).first_message())
    assert str(unknown.value) == str(wrong.value)
    assert "mallory" in unknown.value.reason


def test_a_credential_of_the_other_mechanism_does_not_count() -> None:
    users = {"alice": _credential(SCRAM_SHA_256, "alice", "pw")}
    client = ScramClient("alice", "pw", SCRAM_SHA_512)
    server = ScramServer(SCRAM_SHA_512, lambda u: None, SERVER_NONCE)
    with pytest.raises(ScramFailure):
        server.step(client.first_message())
    # the same password under SHA-256 keys does not pass SHA-512's proof either
    server = _server(SCRAM_SHA_512, users)
    client.process_server_first_message(server.step(client.first_message()))
    with pytest.raises(ScramFailure):
        server.step(client.final_message())


def test_reauthentication_names_its_phase() -> None:
    server = _server(SCRAM_SHA_512, {}, reauthentication=True)
    with pytest.raises(ScramFailure, match="during re-authentication due to invalid"):
        server.step(ScramClient("nobody", "x", SCRAM_SHA_512).first_message())


def _first_step(users: dict[str, ScramCredential]) -> tuple[ScramServer, ScramClient]:
    server = _server(SCRAM_SHA_512, users)
    client = ScramClient("alice", "pw", SCRAM_SHA_512)
    client.process_server_first_message(server.step(client.first_message()))
    return server, client


ALICE = {"alice": _credential(SCRAM_SHA_512, "alice", "pw")}


def test_a_wrong_nonce_fails_even_with_the_right_password() -> None:
    server, client = _first_step(ALICE)
    final = client.final_message()
    tampered = final.replace(SERVER_NONCE.encode(), b"other-server-nonce1")
    with pytest.raises(ScramFailure, match="SCRAM-SHA-512$") as e:
        server.step(tampered)
    assert "nonce" in e.value.reason
    with pytest.raises(SaslError, match="state FAILED"):
        server.step(final)  # a failed exchange is over


@pytest.mark.parametrize("proof", [b"", b"AAAA", b"not-base64!", b"QUJD"])
def test_a_bad_proof_fails(proof: bytes) -> None:
    server, client = _first_step(ALICE)
    head = client.final_message().rpartition(b",p=")[0]
    with pytest.raises(ScramFailure):
        server.step(head + b",p=" + proof)


@pytest.mark.parametrize("token", [
    b"", b"garbage", b"n,,", b"n,,n=alice", b"n,,r=abc,n=alice",
    b"y,,n=alice,r=abc",                      # the client could bind, Kafka refuses channel binding
    b"p=tls-unique,,n=alice,r=abc",           # channel binding asked for
    b"n,,n=al=ice,r=abc",                     # '=' must be escaped
    b"n,,n=alice,r=ab,c",                     # a bare field is no extension
    "n,,n=\u00e9l\u00e8ve,r=abc".encode(),    # Kafka's saslname is ASCII
    b"n,,n=alice,r=\xff\xfe",                 # not UTF-8
    b"n,,n=alice,r=a\x00b",
])
def test_a_malformed_client_first_fails(token: bytes) -> None:
    server = _server(SCRAM_SHA_512, ALICE)
    with pytest.raises(ScramFailure) as e:
        server.step(token)
    assert str(e.value) == _failure(SCRAM_SHA_512)
    assert not server.complete


@pytest.mark.parametrize("token", [b"", b"c=biws", b"c=biws,p=AAAA", b"r=x,c=biws,p=AAAA",
                                   b"c=b!ws,r=x,p=AAAA"])
def test_a_malformed_client_final_fails(token: bytes) -> None:
    server, _ = _first_step(ALICE)
    with pytest.raises(ScramFailure):
        server.step(token)


def test_authzid() -> None:
    server = _server(SCRAM_SHA_512, ALICE)
    client = ScramClient("alice", "pw", SCRAM_SHA_512)
    first = client.first_message()
    assert first.startswith(b"n,,")
    client.process_server_first_message(server.step(b"n,a=alice," + first[3:]))
    client.process_server_final_message(server.step(client.final_message()))
    assert server.authorization_id == "alice"

    other = _server(SCRAM_SHA_512, ALICE)
    with pytest.raises(SaslError) as e:
        other.step(b"n,a=admin," + first[3:])
    assert str(e.value) == ("Authentication failed: Client requested an authorization id "
                            "that is different from username")


def test_extensions_are_ignored_but_tokenauth_fails() -> None:
    server = _server(SCRAM_SHA_512, ALICE)
    client = ScramClient("alice", "pw", SCRAM_SHA_512)
    first = client.first_message() + b",foo=bar"
    client.auth_message += b",foo=bar"  # the client-first-bare it sent
    client.process_server_first_message(server.step(first))
    client.process_server_final_message(server.step(client.final_message()))
    assert server.complete

    token = ScramClient("alice", "pw", SCRAM_SHA_512).first_message() + b",tokenauth=true"
    with pytest.raises(ScramFailure, match="invalid credentials") as e:
        _server(SCRAM_SHA_512, ALICE).step(token)
    assert "token" in e.value.reason


def test_too_few_iterations_never_log_in() -> None:
    users = {"alice": _credential(SCRAM_SHA_512, "alice", "pw", iterations=4095)}
    with pytest.raises(ScramFailure) as e:
        _server(SCRAM_SHA_512, users).step(ScramClient("alice", "pw", SCRAM_SHA_512)
                                           .first_message())
    assert "4095" in e.value.reason


def test_nothing_after_completion() -> None:
    server, client = _first_step(ALICE)
    final = client.final_message()
    server.step(final)
    with pytest.raises(SaslError, match="state COMPLETE"):
        server.step(final)
    assert server.complete and server.authorization_id == "alice"


def test_construction_and_credentials() -> None:
    with pytest.raises(ValueError):
        ScramServer("PLAIN", ALICE.get, SERVER_NONCE)
    with pytest.raises(ValueError):
        ScramServer(SCRAM_SHA_256, ALICE.get, "with,comma")
    with pytest.raises(ValueError, match="Empty key"):
        scram.credential_from_salted(SCRAM_SHA_256, b"salt", b"", 4096)
    assert scram.mechanism_of_type(1) == SCRAM_SHA_256
    assert scram.mechanism_of_type(2) == SCRAM_SHA_512
    assert scram.mechanism_of_type(0) is None and scram.mechanism_of_type(3) is None


@settings(max_examples=300, deadline=None)
@given(first=st.binary(max_size=80), final=st.binary(max_size=120))
def test_any_bytes_fail_as_sasl_errors_only(first: bytes, final: bytes) -> None:
    """A client's bytes never become anything but a SaslError (no broker traceback)."""
    server = _server(SCRAM_SHA_256, {"a": _credential(SCRAM_SHA_256, "a", "pw")})
    for token in (b"n,,n=a,r=" + first, first, final):
        try:
            server.step(token)
        except SaslError:
            assert not server.complete
