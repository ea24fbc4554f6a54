"""A peer's address as Kafka writes it.

Kafka names a client's host by Java's ``InetAddress.getHostAddress``: ACL
hosts match that text, DescribeGroups shows it after a ``/``, per-IP
connection limits and ip quota entities key by the address. Python's socket
layer spells IPv6 differently (``::1`` compressed, an IPv4 peer of a
dual-stack socket as ``::ffff:a.b.c.d``), so every peer address is rewritten
here once, when its connection is accepted. Pure.
"""

from __future__ import annotations

import ipaddress


def host_address(ip: str) -> str:
    """A peer's address as Kafka (Java's ``InetAddress.getHostAddress``) writes
    it — what ACL hosts, client hosts and per-IP limits name: an IPv4-mapped
    IPv6 address as IPv4, IPv6 as eight groups without ``::`` compression
    (``0:0:0:0:0:0:0:1``), a zone kept after ``%``."""
    address, sep, zone = ip.partition("%")
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return ip
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        groups = parsed.packed
        text = ":".join(f"{int.from_bytes(groups[i:i + 2], 'big'):x}" for i in range(0, 16, 2))
        return text + sep + zone
    return str(parsed)
