"""The metadata image finds a topic's filtered views without a walk over all
topics (``MetadataImage.views_of``): a deletion, a partition move and an
``add_partitions`` ask for them, and with thousands of topics a walk per
deletion made a batch of deletions quadratic."""

from __future__ import annotations

import uuid
from random import Random
from typing import Any

from kcompat.broker.storage.metadata import MetadataImage


class _NoWalk(dict[str, Any]):
    """Topics that refuse to be walked (found by name only)."""

    def values(self) -> Any:
        raise AssertionError("walked every topic")

    def items(self) -> Any:
        raise AssertionError("walked every topic")

    def __iter__(self) -> Any:
        raise AssertionError("walked every topic")


def _create(image: MetadataImage, name: str, view_of: str | None = None) -> None:
    configs = {} if view_of is None else {"kc.view.of": view_of, "kc.view.filter": "a = 1"}
    image.apply({"type": "create_topic", "name": name, "id": str(uuid.uuid4()),
                 "partitions": 1, "configs": configs})


def test_a_deletion_finds_the_views_of_its_topic_by_name() -> None:
    image = MetadataImage()
    for i in range(2_000):
        _create(image, f"t{i}")
    _create(image, "v1", view_of="t7")
    _create(image, "v2", view_of="t7")
    image.topics = _NoWalk(image.topics)
    assert sorted(v.name for v in image.views_of("t7")) == ["v1", "v2"]
    assert image.views_of("t8") == []
    image.apply({"type": "add_partitions", "name": "t7", "partitions": 3})
    assert [image.topics[v].partitions for v in ("v1", "v2")] == [3, 3]
    image.apply({"type": "delete_topic", "name": "t7"})
    assert not {"t7", "v1", "v2"} & set(dict.keys(image.topics))
    assert image.views_of("t7") == []


def test_the_view_index_follows_creates_deletes_and_config_changes() -> None:
    """Random operations; after each, ``views_of`` answers what a walk finds."""
    rng = Random(5)
    image = MetadataImage()
    for step in range(3_000):
        names = sorted(image.topics)
        roll = rng.random()
        if roll < 0.45 or not names:
            source = rng.choice(names) if names and rng.random() < 0.5 else None
            _create(image, f"n{step}", view_of=source)
        elif roll < 0.7:
            image.apply({"type": "delete_topic", "name": rng.choice(names)})
        else:
            name = rng.choice(names)
            configs = dict(image.topics[name].configs)
            if rng.random() < 0.5:
                configs.pop("kc.view.of", None)
            else:
                configs["kc.view.of"] = rng.choice(names)
            image.apply({"type": "alter_configs", "name": name, "configs": configs})
        for source in rng.sample(sorted(image.topics), min(5, len(image.topics))):
            walked = sorted(t.name for t in image.topics.values() if t.view_of == source)
            assert sorted(v.name for v in image.views_of(source)) == walked, step
