"""The controller's reassignment records (``controller.reassignment.reassign_record``)
and the image's view of them: a move keeps every replica that may be a voter
of the partition's Raft group until it is done — a cancellation or a new
target in the middle of a move keeps the replicas the earlier target added,
or their broker would drop a copy the group may still need for its quorum."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from kcompat.broker.controller.reassignment import done_record, reassign_record
from kcompat.broker.storage.metadata import BrokerInfo, MetadataImage, TopicMeta
from kcompat.broker.storage.state import TopicError


def _controller(replicas: tuple[int, ...]) -> Any:
    image = MetadataImage()
    image.topics["t"] = TopicMeta("t", uuid.uuid4(), 1)
    for node in (1, 2, 3, 4):
        image.brokers[node] = BrokerInfo(node, "h", 9000 + node, None, "i", fenced=False)
    rt = SimpleNamespace(image=image, assignments={("t", 0): (7, replicas)})
    return SimpleNamespace(rt=rt, state=SimpleNamespace(topics=image.topics))


def _apply(ctl: Any, rec: dict[str, Any] | None) -> None:
    assert rec is not None
    ctl.rt.image.apply(rec)
    moving = ctl.rt.image.reassignments.get(("t", 0))
    replicas = tuple(rec["replicas"]) if rec["type"] == "reassign_done" else moving.replicas
    ctl.rt.assignments[("t", 0)] = (7, replicas)


def test_a_move_lists_the_target_then_the_replicas_leaving() -> None:
    ctl = _controller((1, 2, 3))
    _apply(ctl, reassign_record(ctl, "t", 0, [2, 3, 4]))
    moving = ctl.rt.image.reassignments[("t", 0)]
    assert (moving.replicas, moving.adding, moving.removing) == ((2, 3, 4, 1), (4,), (1,))


def test_a_cancellation_keeps_what_the_move_added_until_done() -> None:
    ctl = _controller((1,))
    _apply(ctl, reassign_record(ctl, "t", 0, [4]))
    _apply(ctl, reassign_record(ctl, "t", 0, None))  # 4 may be a voter by now
    moving = ctl.rt.image.reassignments[("t", 0)]
    assert moving.target == (1,) and moving.original == (1,)
    assert moving.replicas == (1, 4) and moving.removing == (4,)
    assert done_record(ctl, "t", 0, [4]) is None  # the cancelled target is not done
    _apply(ctl, done_record(ctl, "t", 0, [1]))
    assert ctl.rt.image.reassignments == {} and ctl.rt.assignments[("t", 0)][1] == (1,)


def test_a_new_target_mid_move_keeps_the_earlier_targets_replicas() -> None:
    ctl = _controller((1, 2))
    _apply(ctl, reassign_record(ctl, "t", 0, [2, 3]))
    _apply(ctl, reassign_record(ctl, "t", 0, [2, 4]))
    moving = ctl.rt.image.reassignments[("t", 0)]
    assert moving.original == (1, 2) and set(moving.replicas) == {1, 2, 3, 4}
    assert moving.adding == (4,) and set(moving.removing) == {1, 3}


def test_order_only_and_no_change() -> None:
    ctl = _controller((1, 2))
    assert reassign_record(ctl, "t", 0, [1, 2]) is None
    assert reassign_record(ctl, "t", 0, [2, 1]) == {
        "type": "reassign_done", "name": "t", "index": 0, "replicas": [2, 1]}
    with pytest.raises(TopicError):
        reassign_record(ctl, "t", 0, None)  # nothing to cancel

