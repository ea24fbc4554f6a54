"""The CLI's client security: Java properties, Kafka's client keys (and their
refusals) with the flags over them, kafka-python's arguments, the TLS context
and the SASL client stepped against kcompat's own SCRAM server."""

from __future__ import annotations

import argparse
import ssl
import tempfile
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from kafka.admin import ScramMechanism, UserScramCredentialUpsertion

from compat_tests._tls import TestPki
from kcompat.cli._base import CliError
from kcompat.cli._common import Parser, add_client_args
from kcompat.cli._security import (
    ClientSecurity,
    Flags,
    SaslClient,
    of_args,
    parse_properties,
    resolve,
)
from kcompat.security import scram
from kcompat.security.sasl import SaslError
from kcompat.security.scram import ScramServer

SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
              'username="alice" password="alice-secret";')
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="bob" password="b\\"ob";')
SASL_SSL = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": SCRAM_JAAS, "ssl.truststore.type": "PEM",
            "ssl.truststore.location": "/etc/ca.pem"}


def _refused(props: dict[str, str], flags: Flags | None = None) -> str:
    with pytest.raises(CliError) as e:
        resolve(props, flags or Flags(), "client.properties")
    assert e.value.exit_code == 2
    return str(e.value)


# -- Java properties ---------------------------------------------------------------------
def test_properties_separators_comments_and_continuations() -> None:
    text = ("# a comment\n"
            "  ! another\n"
            "\n"
            "security.protocol=SASL_SSL\r\n"
            "sasl.mechanism : SCRAM-SHA-512\n"
            "ssl.protocol TLSv1.3\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule \\\n"
            "    required \\\n"
            "    username=\"alice\" password=\"a#b\";\n"
            "empty=\n"
            "ends.with.backslash=c:\\\\\n"
            "esc\\=aped\\ key=\\u00e9\\t\n"
            "twice=1\n"
            "twice=2")
    assert parse_properties(text) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "ssl.protocol": "TLSv1.3",
        "sasl.jaas.config": ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                             'username="alice" password="a#b";'),
        "empty": "",
        "ends.with.backslash": "c:\\",
        "esc=aped key": "\u00e9\t",
        "twice": "2",
    }


def test_a_comment_does_not_continue_but_a_continued_line_may_start_with_hash() -> None:
    assert parse_properties("# a \\\nk=v\\\n  #not a comment") == {"k": "v#not a comment"}


def test_a_malformed_unicode_escape_is_refused() -> None:
    with pytest.raises(CliError, match="malformed"):
        parse_properties("k=\\u12x4", "f.properties")


# -- properties and flags -> ClientSecurity ---------------------------------------------
def test_sasl_ssl_with_scram_from_the_jaas_config() -> None:
    s = resolve(SASL_SSL, Flags())
    assert (s.protocol, s.mechanism, s.username, s.password) == (
        "SASL_SSL", "SCRAM-SHA-512", "alice", "alice-secret")
    assert (s.tls, s.sasl, s.ca_file, s.check_hostname) == (True, True, "/etc/ca.pem", True)
    assert "alice-secret" not in repr(s)


def test_plain_login_module_and_lower_case_values() -> None:
    s = resolve({"security.protocol": "sasl_plaintext", "sasl.mechanism": "plain",
                 "sasl.jaas.config": PLAIN_JAAS}, Flags())
    assert (s.protocol, s.mechanism, s.username, s.password) == (
        "SASL_PLAINTEXT", "PLAIN", "bob", 'b"ob')


def test_flags_override_the_file() -> None:
    s = resolve(SASL_SSL, Flags(mechanism="PLAIN", username="carol", password="pw",
                                cafile="/other/ca.pem"))
    assert (s.mechanism, s.username, s.password, s.ca_file) == (
        "PLAIN", "carol", "pw", "/other/ca.pem")
    s = resolve(SASL_SSL, Flags(protocol="SASL_PLAINTEXT"))
    assert (s.protocol, s.tls, s.ca_file) == ("SASL_PLAINTEXT", False, None)


def test_flags_alone() -> None:
    s = resolve({}, Flags(protocol="SSL", cafile="ca.pem", certfile="c.crt", keyfile="c.key"))
    assert (s.protocol, s.ca_file, s.cert_file, s.key_file) == ("SSL", "ca.pem", "c.crt", "c.key")
    assert resolve({}, Flags()) == ClientSecurity()


def test_keystores_in_a_file_or_inline() -> None:
    base = {"security.protocol": "SSL", "ssl.keystore.type": "PEM"}
    s = resolve({**base, "ssl.keystore.location": "/k.pem", "ssl.key.password": "kp"}, Flags())
    assert (s.cert_file, s.key_file, s.key_password) == ("/k.pem", None, "kp")
    s = resolve({**base, "ssl.keystore.key": "KEY", "ssl.keystore.certificate.chain": "CHAIN",
                 "ssl.truststore.type": "PEM", "ssl.truststore.certificates": "CA"}, Flags())
    assert (s.key_pem, s.cert_pem, s.ca_pem, s.ca_file) == ("KEY", "CHAIN", "CA", None)


def test_the_endpoint_identification_algorithm() -> None:
    ssl_only = {"security.protocol": "SSL"}
    assert resolve(ssl_only, Flags()).check_hostname
    assert resolve({**ssl_only, "ssl.endpoint.identification.algorithm": "HTTPS"},
                   Flags()).check_hostname
    assert not resolve({**ssl_only, "ssl.endpoint.identification.algorithm": ""},
                       Flags()).check_hostname
    assert "ssl.endpoint.identification.algorithm" in _refused(
        {**ssl_only, "ssl.endpoint.identification.algorithm": "ldaps"})


def test_client_keys_that_are_not_security_are_ignored() -> None:
    """A Kafka command-config file often carries client.id or timeouts too."""
    s = resolve({**SASL_SSL, "client.id": "ops", "request.timeout.ms": "30000"}, Flags())
    assert s == resolve(SASL_SSL, Flags())


def test_keys_of_another_protocol_are_ignored_as_kafka_ignores_them() -> None:
    s = resolve({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                 "sasl.jaas.config": PLAIN_JAAS, "ssl.truststore.type": "JKS",
                 "ssl.truststore.location": "/ts.jks"}, Flags())
    assert s.ca_file is None


@pytest.mark.parametrize("props,named", [
    ({"security.providers": "x"}, "security.providers: not supported"),
    ({"sasl.kerberos.service.name": "kafka"}, "sasl.kerberos.service.name: not supported"),
    ({"ssl.cipher.suites": "X"}, "ssl.cipher.suites: not supported"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"},
     "sasl.mechanism: 'GSSAPI' is not supported"),
    ({"security.protocol": "TLS"}, "security.protocol: 'TLS' is not supported"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": PLAIN_JAAS},
     "needs a SASL mechanism"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
     "PLAIN needs a username and a password"),
    ({**SASL_SSL, "sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;"},
     "sasl.jaas.config: login module com.sun.security.auth.module.Krb5LoginModule"),
    ({**SASL_SSL, "sasl.jaas.config": SCRAM_JAAS.replace(";", " tokenauth=true;")},
     "tokenauth"),
    ({**SASL_SSL, "sasl.jaas.config": "ScramLoginModule required username=alice"},
     "sasl.jaas.config: a JAAS config entry must end with ';'"),
    ({**SASL_SSL, "ssl.truststore.type": "JKS"}, "ssl.truststore.type: JKS stores"),
    ({**SASL_SSL, "ssl.truststore.type": ""}, "ssl.truststore.type: JKS (Kafka's default)"),
    ({**SASL_SSL, "ssl.truststore.password": "x"}, "ssl.truststore.password: a PEM trust store"),
    ({**SASL_SSL, "ssl.truststore.certificates": "CA"}, "both ssl.truststore.location and"),
    ({**SASL_SSL, "ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/k.p12"},
     "ssl.keystore.type: PKCS12 stores"),
    ({**SASL_SSL, "ssl.keystore.type": "PEM", "ssl.keystore.location": "/k.pem",
      "ssl.keystore.password": "x"}, "ssl.keystore.password: a PEM key store"),
    ({**SASL_SSL, "ssl.keystore.type": "PEM", "ssl.keystore.key": "KEY"},
     "ssl.keystore.key and ssl.keystore.certificate.chain go together"),
    ({**SASL_SSL, "ssl.keystore.type": "PEM", "ssl.keystore.location": "/k.pem",
      "ssl.keystore.key": "K", "ssl.keystore.certificate.chain": "C"},
     "both ssl.keystore.location and ssl.keystore.key"),
    ({**SASL_SSL, "ssl.enabled.protocols": "TLSv1.2,TLSv1.1"}, "'TLSv1.1' is not supported"),
])
def test_refusals_name_the_key(props: dict[str, str], named: str) -> None:
    message = _refused(props)
    assert named in message
    assert message.startswith("client.properties: ") or "needs" in message


@pytest.mark.parametrize("flags,named", [
    (Flags(username="alice"), "--sasl-username has no effect with security protocol PLAINTEXT"),
    (Flags(protocol="SASL_PLAINTEXT", mechanism="PLAIN", username="a", password="b",
           cafile="ca.pem"), "--ssl-cafile has no effect with security protocol SASL_PLAINTEXT"),
    (Flags(protocol="SSL", keyfile="k.pem"), "--ssl-keyfile needs --ssl-certfile"),
])
def test_flags_without_effect_are_refused(flags: Flags, named: str) -> None:
    assert named in _refused({}, flags)


# -- kafka-python's arguments ---------------------------------------------------------------
def test_kafka_python_config() -> None:
    assert resolve({}, Flags()).kafka_python_config() == {"security_protocol": "PLAINTEXT"}
    s = resolve({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                 "sasl.jaas.config": PLAIN_JAAS}, Flags())
    assert s.kafka_python_config() == {
        "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "bob", "sasl_plain_password": 'b"ob'}


def test_kafka_python_config_over_tls_carries_the_context(tmp_path: Path) -> None:
    pki = TestPki.create(tmp_path)
    s = resolve({**SASL_SSL, "ssl.truststore.location": str(pki.ca),
                 "ssl.endpoint.identification.algorithm": "",
                 "sasl.jaas.config": SCRAM_JAAS.replace('"alice"', '"a,b=c"')}, Flags())
    config = s.kafka_python_config()
    assert isinstance(config.pop("ssl_context"), ssl.SSLContext)
    assert config == {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                      "sasl_plain_username": "a=2Cb=3Dc",  # SCRAM's saslname (RFC 5802)
                      "sasl_plain_password": "alice-secret", "ssl_check_hostname": False}


# -- the TLS context ----------------------------------------------------------------------------
def test_inline_keystore_and_truststore_load(tmp_path: Path) -> None:
    pki = TestPki.create(tmp_path)
    alice = pki.clients["alice"]
    s = resolve({"security.protocol": "SSL", "ssl.keystore.type": "PEM",
                 "ssl.keystore.key": alice.key_pem(),
                 "ssl.keystore.certificate.chain": alice.chain_pem(),
                 "ssl.truststore.type": "PEM",
                 "ssl.truststore.certificates": pki.ca.read_text(),
                 "ssl.enabled.protocols": "TLSv1.3"}, Flags())
    ctx = s.ssl_context
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.minimum_version == ctx.maximum_version == ssl.TLSVersion.TLSv1_3
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "kcompat test CA"),),
                                                          (("organizationName", "kcompat-tests"),))]
    assert not list(Path(tempfile.gettempdir()).glob("kcompat-cli-keystore-*"))


def test_an_encrypted_key_needs_its_password(tmp_path: Path) -> None:
    pki = TestPki.create(tmp_path)
    alice = pki.clients["alice"]
    key = serialization.load_pem_private_key(alice.key.read_bytes(), None)
    encrypted = tmp_path / "enc.pem"
    encrypted.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"key-pw")) + alice.chain.read_bytes())
    props = {"security.protocol": "SSL", "ssl.keystore.type": "PEM",
             "ssl.keystore.location": str(encrypted)}
    with pytest.raises(CliError, match=f"ssl.keystore.location {encrypted}.*needs ssl.key.password"):
        _ = resolve(props, Flags()).ssl_context
    with pytest.raises(CliError, match="is ssl.key.password right"):
        _ = resolve({**props, "ssl.key.password": "wrong"}, Flags()).ssl_context
    assert resolve({**props, "ssl.key.password": "key-pw"}, Flags()).ssl_context


def test_a_missing_store_file_is_named() -> None:
    s = resolve({}, Flags(protocol="SSL", cafile="/nonexistent/ca.pem"))
    with pytest.raises(CliError, match="trust store \\(--ssl-cafile /nonexistent/ca.pem\\): "
                                       "No such file or directory"):
        _ = s.ssl_context


# -- the SASL client ----------------------------------------------------------------------------
def test_plain_token() -> None:
    client = SaslClient("PLAIN", "bob", "pw")
    assert client.first() == b"\0bob\0pw"
    assert client.respond(b"") is None


def _scram_server(mechanism: str, user: str, password: str) -> ScramServer:
    up = UserScramCredentialUpsertion(user, ScramMechanism[mechanism.replace("-", "_")],
                                      password, iterations=4096)
    credential = scram.credential_from_salted(mechanism, up.salt, up.salted_password, 4096)
    return ScramServer(mechanism, {user: credential}.get, "servernonce")


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_against_kcompats_server_with_an_escaped_name(mechanism: str) -> None:
    server = _scram_server(mechanism, "a,b=c", "pw")
    client = SaslClient(mechanism, "a,b=c", "pw")
    final = client.respond(server.step(client.first()))
    assert final is not None
    assert client.respond(server.step(final)) is None  # the server's signature checked
    assert server.complete and server.authorization_id == "a,b=c"


def test_scram_wrong_password_is_the_servers_refusal() -> None:
    server = _scram_server("SCRAM-SHA-512", "alice", "right")
    client = SaslClient("SCRAM-SHA-512", "alice", "wrong")
    final = client.respond(server.step(client.first()))
    assert final is not None
    with pytest.raises(SaslError):
        server.step(final)


def test_scram_a_forged_server_signature_is_refused() -> None:
    server = _scram_server("SCRAM-SHA-512", "alice", "pw")
    client = SaslClient("SCRAM-SHA-512", "alice", "pw")
    final = client.respond(server.step(client.first()))
    assert final is not None
    server.step(final)
    with pytest.raises(CliError, match="SCRAM-SHA-512 answer does not check out"):
        client.respond(b"v=" + b"A" * 88)


# -- the command line ----------------------------------------------------------------------------
def _args(argv: list[str]) -> argparse.Namespace:
    p = Parser(prog="t")
    add_client_args(p)
    return p.parse_args(argv)


def test_command_config_file_with_flags_over_it(tmp_path: Path) -> None:
    conf = tmp_path / "client.properties"
    conf.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                    f"sasl.jaas.config={SCRAM_JAAS}\n"
                    "ssl.truststore.type=PEM\nssl.truststore.location=/ca.pem\n")
    args = _args(["--command-config", str(conf), "--sasl-password", "over"])
    s = of_args(args)
    assert (s.protocol, s.username, s.password, s.ca_file) == (
        "SASL_SSL", "alice", "over", "/ca.pem")
    conf.write_text("security.protocol=PLAINTEXT\n")
    assert of_args(args) is s  # read once per command


def test_a_bad_command_config_names_the_file_and_key(tmp_path: Path) -> None:
    with pytest.raises(CliError, match="--command-config: cannot read /nonexistent.properties"):
        of_args(_args(["--command-config", "/nonexistent.properties"]))
    conf = tmp_path / "c.properties"
    conf.write_text("security.protocol=SSL\nssl.truststore.type=JKS\n"
                    "ssl.truststore.location=/ts.jks\n")
    with pytest.raises(CliError, match=f"{conf}: ssl.truststore.type: JKS stores are not "
                                       "supported"):
        of_args(_args(["--command-config", str(conf)]))


def test_usage_errors_for_unknown_protocols_and_mechanisms() -> None:
    with pytest.raises(SystemExit) as e:
        _args(["--security-protocol", "TLS"])
    assert e.value.code == 2
    assert _args(["--security-protocol", "sasl_ssl"]).security_protocol == "SASL_SSL"
