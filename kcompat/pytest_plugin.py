"""pytest fixtures for testing Kafka code against kcompat (the ``pytest11`` entry point).

Theory of operation
-------------------
Installing kcompat registers this module with pytest (entry point ``kcompat``
in ``pytest11``; ``-p no:kcompat`` turns it off). Its fixtures wrap
``kcompat.embedded``:

- ``kcompat_broker`` (session): one broker, started on first use (about a
  third of a second), stopped and its temporary data dir deleted at the end of
  the session. It is the bootstrap string: pass it to any client as is; it
  also has ``create_topic``, ``delete_topic``, ``list_topics``, ``admin()``
  and ``data_dir``.
- ``kcompat_cluster`` (session): the same for three brokers in one Raft
  cluster (topics default to replication factor 3); about two seconds.
- ``kcompat_topic`` (function): a fresh topic on ``kcompat_broker``, named
  after the test, so tests sharing the session's broker never see each
  other's records.
- ``kcompat_config`` (session): the broker settings both start with, ``{}``;
  override it in a conftest.py to change them (Kafka's names, e.g.
  ``{"num.partitions": 3}``).

Every fixture name starts with ``kcompat_`` so that it never shadows a
project's own ``broker`` or ``topic``. This module is imported at every pytest
start of every project that has kcompat installed: it imports pytest and the
standard library only, and ``kcompat._embedded`` when a fixture is first used.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from kcompat._embedded import EmbeddedKafka

CLUSTER_SIZE = 3


@pytest.fixture(scope="session")
def kcompat_config() -> dict[str, Any]:
    """Broker settings for ``kcompat_broker`` and ``kcompat_cluster``; override to change."""
    return {}


@pytest.fixture(scope="session")
def kcompat_broker(kcompat_config: dict[str, Any]) -> Iterator[EmbeddedKafka]:
    """One kcompat broker for the session: its bootstrap string, with topic helpers."""
    from kcompat._embedded import embedded

    with embedded(config=kcompat_config) as broker:
        yield broker


@pytest.fixture(scope="session")
def kcompat_cluster(kcompat_config: dict[str, Any]) -> Iterator[EmbeddedKafka]:
    """Three kcompat brokers in one cluster for the session (replication factor 3)."""
    from kcompat._embedded import embedded

    with embedded(brokers=CLUSTER_SIZE, config=kcompat_config) as cluster:
        yield cluster


def topic_name(test_name: str) -> str:
    """A topic name unique to this call, after the test: Kafka's legal characters only."""
    clean = re.sub(r"[^a-zA-Z0-9._-]+", "-", test_name).strip("-.")[:100] or "topic"
    return f"{clean}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def kcompat_topic(kcompat_broker: EmbeddedKafka, request: pytest.FixtureRequest) -> str:
    """A new topic on ``kcompat_broker`` (``num.partitions`` partitions), named after the test."""
    return kcompat_broker.create_topic(topic_name(request.node.name))
