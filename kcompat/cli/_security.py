"""The CLI's client-side security: Kafka's client properties, TLS and SASL.

Theory of operation
-------------------
Kafka's tools take their security as a client properties file
(``--command-config``): ``security.protocol``, ``sasl.mechanism``,
``sasl.jaas.config`` and the ``ssl.*`` keys. ``parse_properties`` reads Java's
properties syntax; ``resolve`` lays the command-line flags over the file's
keys and checks them as Kafka's clients do; the result, a ``ClientSecurity``,
becomes kafka-python's arguments (``kafka_python_config``) and what
``_kio.Connection`` needs: an ``ssl.SSLContext`` and a ``SaslClient`` that
steps PLAIN or SCRAM (RFC 5802, kafka-python's ``ScramClient``) token by
token.

Rules, Kafka's unless said: stores are PEM only (``ssl.*.type`` JKS or PKCS12
is refused by name — kcompat's choice); a PEM store takes no store password,
only ``ssl.key.password``; a keystore is a file (key and chain) or an inline
key with its chain, never both, and likewise the truststore (a file or inline
certificates); ``ssl.endpoint.identification.algorithm`` empty turns the
host-name check off; no truststore means the system's. ``sasl.mechanism`` has
no default here (Kafka's, GSSAPI, is not supported). A key kcompat's CLI does
not read is an error naming it; keys of the other protocols (``ssl.*`` under
SASL_PLAINTEXT) are ignored as Kafka ignores them, but a flag that has no
effect under the protocol chosen is an error.
"""

from __future__ import annotations

import argparse
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from kcompat.broker.net.listeners import load_inline_chain
from kcompat.cli._base import CliError
from kcompat.security import jaas, properties

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
KEYS = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.jaas.config",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.certificates",
    "ssl.truststore.password", "ssl.keystore.type", "ssl.keystore.location",
    "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.keystore.password",
    "ssl.key.password", "ssl.endpoint.identification.algorithm", "ssl.enabled.protocols",
    "ssl.protocol",
})
LOGIN_MODULES = (jaas.PLAIN_LOGIN_MODULE, jaas.SCRAM_LOGIN_MODULE)


@dataclass(frozen=True)
class ClientSecurity:
    """How the CLI's clients connect; the defaults are PLAINTEXT."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    ca_pem: str | None = None
    cert_file: str | None = None  # the chain, and the key too unless key_file
    key_file: str | None = None
    cert_pem: str | None = None  # ssl.keystore.certificate.chain
    key_pem: str | None = field(default=None, repr=False)  # ssl.keystore.key
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True
    tls_versions: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    trust_origin: str = "the system's trusted CAs"
    key_origin: str = ""

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @cached_property
    def ssl_context(self) -> ssl.SSLContext:
        """The TLS client context; a store that cannot be loaded is a CliError."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        versions = sorted(TLS_VERSIONS[v] for v in self.tls_versions)
        ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
        ctx.check_hostname = self.check_hostname  # the chain is verified either way
        try:
            if self.ca_file or self.ca_pem:
                ctx.load_verify_locations(cafile=self.ca_file, cadata=self.ca_pem)
            else:
                ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        except (OSError, ValueError) as e:
            raise CliError(f"cannot load the trust store ({self.trust_origin}): "
                           f"{_reason(e)}", 2) from None
        try:
            if self.cert_file:
                ctx.load_cert_chain(self.cert_file, self.key_file, password=self._key_password)
            elif self.cert_pem and self.key_pem:
                load_inline_chain(ctx, self.cert_pem, self.key_pem, self._key_password)
        except (OSError, ValueError) as e:
            raise CliError(f"cannot load the key store ({self.key_origin}): "
                           f"{_key_reason(e, self.key_password)}", 2) from None
        return ctx

    @property
    def _key_password(self) -> str:
        # never None: ssl would then prompt on the terminal for an encrypted key
        return self.key_password or ""

    def sasl_client(self) -> SaslClient:
        assert self.mechanism and self.username is not None and self.password is not None
        return SaslClient(self.mechanism, self.username, self.password)

    def kafka_python_config(self) -> dict[str, Any]:
        """kafka-python's names for this: security_protocol, sasl_* and ssl_context."""
        config: dict[str, Any] = {"security_protocol": self.protocol}
        if self.sasl:
            assert self.mechanism and self.username is not None
            config.update(sasl_mechanism=self.mechanism,
                          sasl_plain_username=_wire_username(self.mechanism, self.username),
                          sasl_plain_password=self.password)
        if self.tls:  # the context carries the stores, inline ones included
            config.update(ssl_context=self.ssl_context, ssl_check_hostname=self.check_hostname)
        return config


PLAINTEXT = ClientSecurity()


class SaslClient:
    """One login's client side: send ``first()``, then ``respond(challenge)``
    to each answer until it returns None (the exchange is complete)."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism = mechanism
        self._username, self._password = username, password
        self._scram: Any = None
        self._step = 0
        if mechanism.startswith("SCRAM-"):
            from kafka.net.sasl.scram import ScramClient

            self._scram = ScramClient(_wire_username(mechanism, username), password, mechanism)

    def first(self) -> bytes:
        if self._scram is None:  # PLAIN (RFC 4616): authzid, authcid, password
            return b"\0" + self._username.encode() + b"\0" + self._password.encode()
        first: bytes = self._scram.first_message()
        return first

    def respond(self, challenge: bytes) -> bytes | None:
        self._step += 1
        if self._scram is None or self._step > 2:
            return None
        try:
            if self._step == 1:
                self._scram.process_server_first_message(challenge)
                final: bytes = self._scram.final_message()
                return final
            self._scram.process_server_final_message(challenge)
        except (ValueError, KeyError) as e:
            raise CliError(f"the broker's {self.mechanism} answer does not check out: {e}") from e
        return None


def _wire_username(mechanism: str, username: str) -> str:
    """SCRAM's saslname escapes ',' and '=' (RFC 5802 section 5.1); kafka-python does not."""
    if mechanism.startswith("SCRAM-"):
        return username.replace("=", "=3D").replace(",", "=2C")
    return username


# -- Java properties -------------------------------------------------------------------
def parse_properties(text: str, source: str = "properties") -> dict[str, str]:
    """A ``--command-config`` file's keys (``kcompat.security.properties``)."""
    try:
        return properties.parse(text, source)
    except ValueError as e:
        raise CliError(str(e), 2) from None


# -- properties and flags -> ClientSecurity -----------------------------------------------
@dataclass(frozen=True)
class Flags:
    """The command line's security options (None: not given)."""

    protocol: str | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None


def resolve(props: Mapping[str, str], flags: Flags, source: str = "--command-config"
            ) -> ClientSecurity:
    """The security of ``props`` (a client properties file) with ``flags`` over it."""
    for key in props:  # other client keys (client.id, timeouts...) are not security's
        if key not in KEYS and key.startswith(("ssl.", "sasl.", "security.")):
            raise CliError(f"{source}: {key}: {_why_not(key)}", 2)
    protocol = _choice(flags.protocol, props.get("security.protocol"), PROTOCOLS,
                       "--security-protocol", f"{source}: security.protocol") or "PLAINTEXT"
    security = ClientSecurity(protocol=protocol)
    _check_flags_apply(flags, security)
    if security.sasl:
        security = _sasl(security, props, flags, source)
    if security.tls:
        security = _tls(security, props, flags, source)
    return security


def _why_not(key: str) -> str:
    return ("not supported by kcompat's CLI (it reads security.protocol, sasl.mechanism, "
            "sasl.jaas.config and the PEM ssl.keystore.* / ssl.truststore.* keys)")


def _choice(flag: str | None, value: str | None, choices: tuple[str, ...], flag_name: str,
            key_name: str) -> str | None:
    given, name = (flag, flag_name) if flag is not None else (value, key_name)
    if given is None or given.strip() == "":
        return None
    if given.strip().upper() not in choices:
        raise CliError(f"{name}: {given.strip()!r} is not supported "
                       f"(kcompat's CLI takes {', '.join(choices)})", 2)
    return given.strip().upper()


def _check_flags_apply(flags: Flags, security: ClientSecurity) -> None:
    for given, name, applies in (
            (flags.mechanism, "--sasl-mechanism", security.sasl),
            (flags.username, "--sasl-username", security.sasl),
            (flags.password, "--sasl-password", security.sasl),
            (flags.cafile, "--ssl-cafile", security.tls),
            (flags.certfile, "--ssl-certfile", security.tls),
            (flags.keyfile, "--ssl-keyfile", security.tls)):
        if given is not None and not applies:
            raise CliError(f"{name} has no effect with security protocol {security.protocol} "
                           "(set --security-protocol or security.protocol)", 2)
    if flags.keyfile is not None and flags.certfile is None:
        raise CliError("--ssl-keyfile needs --ssl-certfile (the certificate chain)", 2)


def _sasl(security: ClientSecurity, props: Mapping[str, str], flags: Flags,
          source: str) -> ClientSecurity:
    mechanism = _choice(flags.mechanism, props.get("sasl.mechanism"), MECHANISMS,
                        "--sasl-mechanism", f"{source}: sasl.mechanism")
    if mechanism is None:
        raise CliError(f"security protocol {security.protocol} needs a SASL mechanism: set "
                       f"sasl.mechanism or --sasl-mechanism to {', '.join(MECHANISMS)} "
                       "(Kafka's default, GSSAPI, is not supported)", 2)
    username, password = _jaas_credentials(props.get("sasl.jaas.config"), source)
    username = flags.username if flags.username is not None else username
    password = flags.password if flags.password is not None else password
    if username is None or password is None:
        raise CliError(f"{mechanism} needs a username and a password: set sasl.jaas.config "
                       "(username=\"...\" password=\"...\") or --sasl-username and "
                       "--sasl-password", 2)
    return replace(security, mechanism=mechanism, username=username, password=password)


def _jaas_credentials(value: str | None, source: str) -> tuple[str | None, str | None]:
    if value is None or not value.strip():
        return None, None
    try:
        entry = jaas.parse(value)
    except jaas.JaasError as e:
        raise CliError(f"{source}: sasl.jaas.config: {e}", 2) from None
    if entry.login_module not in LOGIN_MODULES:
        raise CliError(f"{source}: sasl.jaas.config: login module {entry.login_module} is not "
                       f"supported (kcompat's CLI logs in with {' or '.join(LOGIN_MODULES)})", 2)
    if entry.options.get("tokenauth", "").lower() == "true":
        raise CliError(f"{source}: sasl.jaas.config: tokenauth (delegation tokens) is not "
                       "supported", 2)
    return entry.options.get("username"), entry.options.get("password")


def _tls(security: ClientSecurity, props: Mapping[str, str], flags: Flags,
         source: str) -> ClientSecurity:
    def get(key: str) -> str | None:
        value = props.get(key)
        return value if value else None  # an empty value is no value, as Kafka reads it

    changes: dict[str, Any] = {}
    if flags.cafile is not None:
        changes.update(ca_file=flags.cafile, trust_origin=f"--ssl-cafile {flags.cafile}")
    else:
        changes.update(_truststore(get, source))
    if flags.certfile is not None:
        changes.update(cert_file=flags.certfile, key_file=flags.keyfile,
                       key_origin=f"--ssl-certfile {flags.certfile}")
    else:
        changes.update(_keystore(get, source))
    changes["key_password"] = get("ssl.key.password")
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https").strip()
    if algorithm.lower() not in ("https", ""):
        raise CliError(f"{source}: ssl.endpoint.identification.algorithm: {algorithm!r} is not "
                       "supported (https, or empty for no host-name check)", 2)
    changes["check_hostname"] = bool(algorithm)
    versions = [v.strip() for v in (get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3").split(",")]
    protocol = get("ssl.protocol")
    for version in [*versions, *([protocol] if protocol and protocol != "TLS" else [])]:
        if version not in TLS_VERSIONS:
            raise CliError(f"{source}: {version!r} is not supported (kcompat's CLI speaks "
                           f"{' and '.join(TLS_VERSIONS)})", 2)
    changes["tls_versions"] = tuple(versions)
    return replace(security, **changes)


def _pem_only(get: Any, store: str, source: str) -> None:
    kind = get(f"ssl.{store}.type") or "JKS (Kafka's default)"
    if kind.upper() != "PEM":
        raise CliError(f"{source}: ssl.{store}.type: {kind} stores are not supported: "
                       f"kcompat's CLI reads PEM files (set ssl.{store}.type=PEM)", 2)
    if get(f"ssl.{store}.password"):
        what = "trust store" if store == "truststore" else "key store (only ssl.key.password)"
        raise CliError(f"{source}: ssl.{store}.password: a PEM {what} takes no password", 2)


def _truststore(get: Any, source: str) -> dict[str, Any]:
    location, certificates = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    if location and certificates:
        raise CliError(f"{source}: both ssl.truststore.location and "
                       "ssl.truststore.certificates are set", 2)
    if not (location or certificates):
        if get("ssl.truststore.password"):
            raise CliError(f"{source}: ssl.truststore.password is set without a trust store", 2)
        return {}
    _pem_only(get, "truststore", source)
    if location:
        return {"ca_file": location, "trust_origin": f"ssl.truststore.location {location}"}
    return {"ca_pem": certificates, "trust_origin": "ssl.truststore.certificates"}


def _keystore(get: Any, source: str) -> dict[str, Any]:
    location, key, chain = (get("ssl.keystore.location"), get("ssl.keystore.key"),
                            get("ssl.keystore.certificate.chain"))
    if bool(key) != bool(chain):
        raise CliError(f"{source}: ssl.keystore.key and ssl.keystore.certificate.chain "
                       "go together", 2)
    if location and key:
        raise CliError(f"{source}: both ssl.keystore.location and ssl.keystore.key are set", 2)
    if not (location or key):
        if get("ssl.keystore.password"):
            raise CliError(f"{source}: ssl.keystore.password is set without a key store", 2)
        return {}
    _pem_only(get, "keystore", source)
    if location:  # key and chain in one PEM file
        return {"cert_file": location, "key_origin": f"ssl.keystore.location {location}"}
    return {"cert_pem": chain, "key_pem": key, "key_origin": "ssl.keystore.key"}


def _reason(e: BaseException) -> str:
    if isinstance(e, OSError) and not isinstance(e, ssl.SSLError) and e.strerror:
        return e.strerror
    return re.sub(r"\s*\(_ssl\.c:\d+\)$", "", str(e))


def _key_reason(e: BaseException, key_password: str | None) -> str:
    if isinstance(e, ssl.SSLError) and "PEM lib" in str(e):
        return ("no private key matching the certificate could be read "
                + ("(is ssl.key.password right?)" if key_password
                   else "(an encrypted key needs ssl.key.password)"))
    return _reason(e)


# -- the command line ------------------------------------------------------------------------
def add_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("security (as Kafka's clients; flags override --command-config)")
    g.add_argument("--command-config", metavar="FILE",
                   help="Kafka client properties: security.protocol, sasl.mechanism, "
                        "sasl.jaas.config, ssl.truststore.* / ssl.keystore.* (PEM), "
                        "ssl.endpoint.identification.algorithm")
    g.add_argument("--security-protocol", metavar="PROTOCOL", type=str.upper, choices=PROTOCOLS,
                   help=f"{', '.join(PROTOCOLS)} (default PLAINTEXT)")
    g.add_argument("--sasl-mechanism", metavar="MECHANISM", type=str.upper, choices=MECHANISMS,
                   help=", ".join(MECHANISMS))
    g.add_argument("--sasl-username", metavar="USER")
    g.add_argument("--sasl-password", metavar="PASSWORD",
                   help="visible to other local users: prefer sasl.jaas.config in a "
                        "--command-config file readable by you only")
    g.add_argument("--ssl-cafile", metavar="PEM", help="CA certificates to trust (PEM)")
    g.add_argument("--ssl-certfile", metavar="PEM",
                   help="client certificate chain (PEM; with its key unless --ssl-keyfile)")
    g.add_argument("--ssl-keyfile", metavar="PEM", help="client private key (PEM)")


def read_properties(path: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"--command-config: cannot read {path}: {_reason(e)}", 2) from None
    return parse_properties(text, path)


def of_args(args: argparse.Namespace) -> ClientSecurity:
    """The security the command line asks for (computed once per command)."""
    cached = getattr(args, "_client_security", None)
    if isinstance(cached, ClientSecurity):
        return cached
    path = getattr(args, "command_config", None)
    flags = Flags(*(getattr(args, name, None) for name in (
        "security_protocol", "sasl_mechanism", "sasl_username", "sasl_password",
        "ssl_cafile", "ssl_certfile", "ssl_keyfile")))
    security = resolve(read_properties(path) if path else {}, flags,
                       path if path else "--command-config")
    args._client_security = security
    return security
