"""The metadata image remembers the ids of topics deleted or re-created (the
last ``GONE_IDS``) with their names: a KIP-848 member may still name the
partitions it holds by such an id (``consumer_group_heartbeat._owned``)."""

from __future__ import annotations

import uuid

import pytest

from kcompat.broker.storage import metadata
from kcompat.broker.storage.metadata import MetadataImage


def _create(image: MetadataImage, name: str) -> uuid.UUID:
    topic_id = uuid.uuid4()
    image.apply({"type": "create_topic", "name": name, "id": str(topic_id), "partitions": 1,
                 "configs": {}})
    return topic_id


def test_deleted_and_recreated_topics_keep_their_old_ids_named() -> None:
    image = MetadataImage()
    first = _create(image, "t")
    assert image.gone_topic(first) is None  # live: not gone
    second = _create(image, "t")  # re-created under its name
    assert image.gone_topic(first) == "t" and image.gone_topic(second) is None
    image.apply({"type": "delete_topic", "name": "t"})
    assert image.gone_topic(second) == "t"


def test_only_the_last_gone_ids_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata, "GONE_IDS", 3)
    image = MetadataImage()
    ids = []
    for n in range(5):
        ids.append(_create(image, f"t{n}"))
        image.apply({"type": "delete_topic", "name": f"t{n}"})
    assert [image.gone_topic(i) for i in ids] == [None, None, "t2", "t3", "t4"]
