"""Client certificate -> principal name: ``ssl.principal.mapping.rules``.

Theory of operation
-------------------
Kafka names a TLS client by its certificate's subject distinguished name in
RFC 2253 form (``CN=alice,OU=eng,O=Acme``), mapped by rules tried in order;
the first rule whose pattern matches the whole DN gives the name:

- ``DEFAULT``: the DN unchanged;
- ``RULE:<regex>/<replacement>/[L|U]``: the regex must match the whole DN;
  the replacement (with ``$1``-style groups) is the name, lower- or
  upper-cased with the optional ``L``/``U`` flag.

No rule matching is an error (the connection is refused), as in Kafka. The
subject comes in as Python's ``ssl`` gives it (a tuple of RDNs of
(attribute, value) pairs, most significant first) and is rendered most
specific first with RFC 2253 escaping.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_ATTR = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O",
         "localityName": "L", "stateOrProvinceName": "ST", "countryName": "C",
         "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID"}
_RULE = re.compile(r"RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)\s*(?:,|$)")
_DEFAULT = re.compile(r"DEFAULT\s*(?:,|$)")


class MappingError(ValueError):
    pass


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        m = self.pattern.fullmatch(dn)
        if m is None:
            return None
        name = re.sub(r"\$(\d+)", lambda g: m.group(int(g.group(1))) or "", self.replacement)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name


def parse_rules(text: str) -> tuple[Rule, ...]:
    text = text.strip()
    rules: list[Rule] = []
    pos = 0
    while pos < len(text):
        while pos < len(text) and text[pos] in " \t\n,":
            pos += 1
        if pos >= len(text):
            break
        d = _DEFAULT.match(text, pos)
        if d:
            rules.append(Rule(None))
            pos = d.end()
            continue
        m = _RULE.match(text, pos)
        if m is None:
            raise MappingError(f"invalid rule: {text[pos:]}")
        try:
            pattern = re.compile(m.group(1).replace("\\/", "/"))
        except re.error as e:
            raise MappingError(f"invalid rule pattern {m.group(1)!r}: {e}") from None
        rules.append(Rule(pattern, m.group(2).replace("\\/", "/"), m.group(3)))
        pos = m.end()
    if not rules:
        raise MappingError("no rules (use DEFAULT)")
    return tuple(rules)


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;=])', r"\\\1", value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def subject_dn(subject: Sequence[Sequence[tuple[str, str]]]) -> str:
    """RFC 2253 rendering of ``ssl.SSLSocket.getpeercert()["subject"]``."""
    rdns = ["+".join(f"{_ATTR.get(k, k)}={_escape(v)}" for k, v in rdn) for rdn in subject]
    return ",".join(reversed(rdns))


def map_dn(rules: Sequence[Rule], dn: str) -> str:
    for rule in rules:
        name = rule.apply(dn)
        if name is not None:
            return name
    raise MappingError(f"No rules apply to {dn}, rules {rules}")
