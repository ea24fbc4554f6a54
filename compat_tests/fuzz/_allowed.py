"""The differences between Apache Kafka and kcompat the fuzzer accepts.

Each entry is a difference a client cannot act on differently, or a choice
Kafka leaves to the broker, with its reason. Error messages, throttle times,
topic ids, leaders and epochs are never compared (``_ops`` leaves them out of
what it observes). Everything else must be the same: a new entry here needs
a reason a Kafka user would accept, and a line in compat_tests/FINDINGS.md.
"""

from __future__ import annotations

from typing import Any

#: (operation, a predicate of (args, kafka's observation, kcompat's), the reason)
ALLOWED: list[tuple[str, Any, str]] = []


def allowed(op: str, args: tuple[Any, ...], kafka: Any, kcompat: Any) -> str | None:
    """The reason the difference is allowed, or None."""
    for name, predicate, reason in ALLOWED:
        if name == op and predicate(args, kafka, kcompat):
            return reason
    return None
