"""Listeners in Kafka's form, and what each one asks of a connection.

Theory of operation
-------------------
``listeners`` names the sockets: ``NAME://host:port`` each, the NAME mapped
to a security protocol by ``listener.security.protocol.map`` (PLAINTEXT,
SSL, SASL_PLAINTEXT, SASL_SSL); ``advertised.listeners`` what clients are
told per listener (Metadata answers with the endpoints of the listener the
client connected on). Unset, there is one PLAINTEXT listener on
``host``:``port`` — the embedded default. One listener carries the
inter-broker traffic (Raft frames, the controller's calls): the one
``inter.broker.listener.name`` names, else the one named like
``security.inter.broker.protocol``, else the first; ``host``/``port`` are
that listener's, so every part of the broker that knew one endpoint keeps
using it.

A listener's settings are the broker's keys, each overridable per listener
as ``listener.name.<name>.<key>`` (Kafka's rule): the TLS context (PEM
keystore and truststore only — ``ssl.keystore.type=PEM``), the client
certificate policy (``ssl.client.auth``), the certificate principal
mapping, the SASL mechanisms and PLAIN's users (the JAAS config of
``listener.name.<name>.plain.sasl.jaas.config``). Everything is checked when
the broker starts: a listener it cannot serve as configured stops it with one
line naming the key.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from dataclasses import dataclass
from typing import Any

from kcompat.broker.config.broker_config import BrokerConfig
from kcompat.broker.config.configdef import ConfigError
from kcompat.security import jaas, sasl
from kcompat.security.ssl_principal import MappingError, Rule, parse_rules

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: the SASL mechanisms kcompat serves
MECHANISMS = (sasl.PLAIN, sasl.SCRAM_SHA_256, sasl.SCRAM_SHA_512, sasl.OAUTHBEARER)


@dataclass(frozen=True)
class Listener:
    name: str
    protocol: str
    host: str  # to bind ("" = every interface)
    port: int  # 0: a free one
    advertised_host: str
    advertised_port: int  # 0: the bound port

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def prefix(self) -> str:
        return self.name.lower()


def _endpoint(key: str, text: str) -> tuple[str, str, int]:
    name, sep, rest = text.strip().partition("://")
    host, colon, port = rest.rpartition(":")
    if not sep or not name or not colon:
        raise ConfigError(key, f"{text!r} is not a listener (expected NAME://host:port)")
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(key, f"{text!r}: the port must be a number") from None
    if not 0 <= number <= 65535:
        raise ConfigError(key, f"{text!r}: the port must be 0-65535")
    return name.upper(), host.strip("[]"), number


def _protocol_map(config: BrokerConfig) -> dict[str, str]:
    out = {}
    for item in filter(None, (x.strip() for x in config["listener.security.protocol.map"].split(","))):
        name, sep, protocol = item.partition(":")
        if not sep or protocol.upper() not in PROTOCOLS:
            raise ConfigError("listener.security.protocol.map",
                              f"{item!r}: expected NAME:PROTOCOL, the protocol one of "
                              f"{', '.join(PROTOCOLS)}")
        out[name.strip().upper()] = protocol.upper()
    return out


def parse(config: BrokerConfig) -> list[Listener]:
    """The broker's listeners, the inter-broker one first."""
    texts = config["listeners"] or [f"PLAINTEXT://{config['host']}:{config['port']}"]
    protocols = _protocol_map(config)
    bound: dict[str, tuple[str, int]] = {}
    for text in texts:
        name, host, port = _endpoint("listeners", text)
        if name in bound:
            raise ConfigError("listeners", f"listener {name} is named twice")
        if name not in protocols:
            raise ConfigError("listeners", f"No security protocol defined for listener {name} "
                              "(add it to listener.security.protocol.map)")
        if port and (host, port) in bound.values():
            raise ConfigError("listeners", f"two listeners bind {host}:{port}")
        bound[name] = (host, port)
    advertised: dict[str, tuple[str, int]] = {}
    for text in config["advertised.listeners"]:
        name, host, port = _endpoint("advertised.listeners", text)
        if name not in bound:
            raise ConfigError("advertised.listeners",
                              f"{name} is not one of the listeners ({', '.join(bound)})")
        advertised[name] = (host, port)
    fallback_host = config["advertised.host"] or config["host"]
    out = []
    for name, (host, port) in bound.items():
        a_host, a_port = advertised.get(name, (host or fallback_host, 0))
        if a_host in ("", "0.0.0.0", "::"):
            raise ConfigError("advertised.listeners",
                              f"listener {name} binds every interface: advertise a host for it")
        out.append(Listener(name, protocols[name], host, port, a_host, a_port))
    inter = inter_broker_name(config, out)
    out.sort(key=lambda item: item.name != inter)
    for item in out:
        check(config, item)
    return out


def inter_broker_name(config: BrokerConfig, listeners: list[Listener]) -> str:
    names = [item.name for item in listeners]
    chosen = str(config["inter.broker.listener.name"]).upper()
    if chosen:
        if chosen not in names:
            raise ConfigError("inter.broker.listener.name",
                              f"{chosen} is not one of the listeners ({', '.join(names)})")
        return chosen
    protocol = config["security.inter.broker.protocol"]
    return str(protocol) if protocol in names else names[0]


def mechanisms(config: BrokerConfig, listener: Listener) -> list[str]:
    return [m.upper() for m in config.for_listener(listener.prefix, "sasl.enabled.mechanisms")]


def jaas_entry(config: BrokerConfig, listener: Listener, mechanism: str) -> jaas.JaasEntry | None:
    text = (config.values.get(f"listener.name.{listener.prefix}.{mechanism.lower()}.sasl.jaas.config")
            or config.for_listener(listener.prefix, "sasl.jaas.config"))
    if not text:
        return None
    try:
        return jaas.parse(text)
    except jaas.JaasError as e:
        raise ConfigError(f"listener.name.{listener.prefix}.{mechanism.lower()}.sasl.jaas.config",
                          str(e)) from None


def plain_users(config: BrokerConfig, listener: Listener) -> dict[str, str]:
    entry = jaas_entry(config, listener, sasl.PLAIN)
    return entry.users() if entry is not None else {}


def oauthbearer_options(config: BrokerConfig, listener: Listener) -> dict[str, Any]:
    """The unsecured validator's options from the listener's OAUTHBEARER JAAS
    config (Kafka's OAuthBearerLoginModule option names)."""
    entry = jaas_entry(config, listener, sasl.OAUTHBEARER)
    options = entry.options if entry is not None else {}
    key = f"listener.name.{listener.prefix}.oauthbearer.sasl.jaas.config"
    try:
        skew = int(options.get("unsecuredValidatorAllowableClockSkewMs", "0"))
    except ValueError:
        raise ConfigError(key, "unsecuredValidatorAllowableClockSkewMs must be a number") from None
    scope = options.get("unsecuredValidatorRequiredScope", "")
    return {"required_scope": [s for s in scope.replace(",", " ").split() if s],
            "clock_skew_ms": skew,
            "principal_claim": options.get("unsecuredValidatorPrincipalClaimName", "sub")}


def principal_rules(config: BrokerConfig, listener: Listener) -> tuple[Rule, ...]:
    text = config.for_listener(listener.prefix, "ssl.principal.mapping.rules")
    try:
        return parse_rules(text)
    except MappingError as e:
        raise ConfigError("ssl.principal.mapping.rules", str(e)) from None


def check(config: BrokerConfig, listener: Listener) -> None:
    """Refuse, naming the key, what this listener could not serve."""
    if listener.sasl:
        enabled = mechanisms(config, listener)
        unknown = [m for m in enabled if m not in MECHANISMS]
        if unknown or not enabled:
            raise ConfigError("sasl.enabled.mechanisms",
                              f"listener {listener.name}: kcompat serves "
                              f"{', '.join(MECHANISMS)}; not {', '.join(unknown) or 'none'}")
        if sasl.PLAIN in enabled:
            entry = jaas_entry(config, listener, sasl.PLAIN)
            if entry is None or entry.login_module != jaas.PLAIN_LOGIN_MODULE:
                raise ConfigError(
                    f"listener.name.{listener.prefix}.plain.sasl.jaas.config",
                    f"listener {listener.name} enables PLAIN: give its users as "
                    f"{jaas.PLAIN_LOGIN_MODULE} required user_<name>=\"<password>\" ...;")
        if sasl.OAUTHBEARER in enabled:
            oauthbearer_options(config, listener)
    if listener.tls:
        server_context(config, listener)
        principal_rules(config, listener)


def _pem(config: BrokerConfig, listener: Listener, key: str) -> Any:
    return config.for_listener(listener.prefix, key)


def server_context(config: BrokerConfig, listener: Listener) -> ssl.SSLContext:
    """The TLS server context of a listener, from its PEM keystore and truststore."""
    def get(key: str) -> Any:
        return _pem(config, listener, key)

    for key in ("ssl.keystore.type", "ssl.truststore.type"):
        location = get(key.replace(".type", ".location"))
        inline = get("ssl.keystore.key" if "keystore" in key else "ssl.truststore.certificates")
        if (location or inline) and get(key).upper() != "PEM":
            raise ConfigError(key, f"kcompat reads PEM stores only: set {key}=PEM "
                              f"(listener {listener.name})")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
    enabled = sorted(versions[v] for v in get("ssl.enabled.protocols"))
    if not enabled:
        raise ConfigError("ssl.enabled.protocols", "enable TLSv1.2, TLSv1.3 or both")
    ctx.minimum_version, ctx.maximum_version = enabled[0], enabled[-1]
    if get("ssl.cipher.suites"):
        try:
            ctx.set_ciphers(":".join(get("ssl.cipher.suites")))
        except ssl.SSLError as e:
            raise ConfigError("ssl.cipher.suites", str(e)) from None
    password = get("ssl.key.password") or get("ssl.keystore.password") or None
    location, key_pem, chain_pem = (get("ssl.keystore.location"), get("ssl.keystore.key"),
                                    get("ssl.keystore.certificate.chain"))
    try:
        if location:
            ctx.load_cert_chain(location, password=password)
        elif key_pem and chain_pem:
            load_inline_chain(ctx, chain_pem, key_pem, password)
        else:
            raise ConfigError("ssl.keystore.location",
                              f"listener {listener.name} ({listener.protocol}) needs a keystore: "
                              "ssl.keystore.location, or ssl.keystore.key with "
                              "ssl.keystore.certificate.chain")
        trust_file, trust_pem = get("ssl.truststore.location"), get("ssl.truststore.certificates")
        if trust_file or trust_pem:
            ctx.load_verify_locations(cafile=trust_file or None, cadata=trust_pem or None)
        else:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError("ssl.keystore.location",
                          f"listener {listener.name}: cannot load its keystore or truststore: "
                          f"{e}") from None
    ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                       "required": ssl.CERT_REQUIRED}[get("ssl.client.auth")]
    return ctx


def load_inline_chain(ctx: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    """``ssl.keystore.key`` and ``ssl.keystore.certificate.chain`` hold PEM text;
    ``ssl`` loads files only: a private temporary file, removed at once (the
    broker's listeners and the CLI's client stores alike)."""
    fd, path = tempfile.mkstemp(prefix="kcompat-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(key.strip() + "\n" + chain.strip() + "\n")
        ctx.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)
