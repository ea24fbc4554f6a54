"""JAAS configuration strings as Kafka reads them (``sasl.jaas.config``).

One login module entry: ``<class> <flag> key=value ... ;`` — values quoted
(``"..."``, with ``\\"`` escapes) or bare; the flag is one of required,
requisite, sufficient, optional. Kafka's PlainLoginModule keeps a broker's
users as ``user_<name>="<password>"`` options and its own identity (for the
inter-broker link) as ``username``/``password``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

FLAGS = ("required", "requisite", "sufficient", "optional")
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"

_TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|(=)|(;))', re.S)


class JaasError(ValueError):
    pass


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)

    def users(self) -> dict[str, str]:
        """PlainLoginModule's ``user_<name>="<password>"`` options."""
        return {k[len("user_"):]: v for k, v in self.options.items()
                if k.startswith("user_") and len(k) > len("user_")}


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos, text = [], 0, text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise JaasError(f"cannot parse JAAS config near {text[pos:pos + 20]!r}")
        pos = m.end()
        if m.group(1) is not None:
            out.append(("str", re.sub(r"\\(.)", r"\1", m.group(1))))
        elif m.group(2) is not None:
            out.append(("word", m.group(2)))
        elif m.group(3):
            out.append(("=", "="))
        elif m.group(4):
            out.append((";", ";"))
    return out


def parse(text: str) -> JaasEntry:
    """The single login module entry of a ``sasl.jaas.config`` value."""
    toks = _tokens(text)
    if len(toks) < 3 or toks[0][0] != "word" or toks[1][0] != "word":
        raise JaasError("expected '<LoginModule> <flag> [key=value ...];'")
    module, flag = toks[0][1], toks[1][1]
    if flag.lower() not in FLAGS:
        raise JaasError(f"invalid control flag {flag!r} (expected one of {', '.join(FLAGS)})")
    if toks[-1][0] != ";":
        raise JaasError("a JAAS config entry must end with ';'")
    options: dict[str, str] = {}
    body = toks[2:-1]
    if any(kind == ";" for kind, _ in body):
        raise JaasError("a sasl.jaas.config value holds exactly one login module")
    if len(body) % 3:
        raise JaasError("login module options must be key=value pairs")
    for i in range(0, len(body), 3):
        (k_kind, key), (eq, _), (v_kind, value) = body[i:i + 3]
        if k_kind != "word" or eq != "=" or v_kind not in ("word", "str"):
            raise JaasError(f"invalid login module option near {key!r}")
        options[key] = value
    return JaasEntry(module, flag.lower(), options)
