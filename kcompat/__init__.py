"""kcompat: a Kafka-wire-compatible broker in Python on trio.

The package's one library entry point is ``kcompat.embedded`` (brokers for a
test, see ``kcompat._embedded``). It is loaded on first use, so that importing
any part of kcompat (the broker's own start included) costs nothing for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kcompat._embedded import EmbeddedError, EmbeddedKafka, embedded

__all__ = ["EmbeddedError", "EmbeddedKafka", "embedded"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from kcompat import _embedded

        return getattr(_embedded, name)
    raise AttributeError(f"module 'kcompat' has no attribute {name!r}")
