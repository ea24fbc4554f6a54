"""The controller's broker membership (``liveness.Membership``): which
register / fence / unfence records heartbeats and silence produce, applied to a
``MetadataImage`` the way every broker applies the committed log."""

from __future__ import annotations

from typing import Any

from kcompat.broker.controller.liveness import Membership
from kcompat.broker.controller.metadata_snapshot import broker_entries
from kcompat.broker.replication.codec import Heartbeat
from kcompat.broker.storage.metadata import MetadataImage

TIMEOUT_MS = 9000


def hb(node: int, incarnation: str = "i1", caught_up: bool = True, **kw: Any) -> Heartbeat:
    return Heartbeat(node, incarnation, "127.0.0.1", 9090 + node, kw.pop("rack", None),
                     caught_up, **kw)


def commit(image: MetadataImage, records: list[dict[str, Any]]) -> list[str]:
    for rec in records:
        image.apply(rec)
    return [r["type"] for r in records]


def test_caught_up_broker_registers_unfenced_once() -> None:
    image, m = MetadataImage(), Membership(TIMEOUT_MS)
    recs = m.heartbeat(hb(1), image.brokers, 0)
    assert [r["type"] for r in recs] == ["register_broker"]
    assert recs[0]["fenced"] is False
    # The record is not committed yet: a second heartbeat must not propose it again.
    assert m.heartbeat(hb(1), image.brokers, 100) == []
    commit(image, recs)
    assert [b.node_id for b in image.live_brokers()] == [1]
    assert (image.brokers[1].host, image.brokers[1].port) == ("127.0.0.1", 9091)
    assert m.heartbeat(hb(1), image.brokers, 200) == []


def test_lagging_broker_registers_fenced_then_unfences_when_caught_up() -> None:
    image, m = MetadataImage(), Membership(TIMEOUT_MS)
    assert commit(image, m.heartbeat(hb(2, caught_up=False), image.brokers, 0)) == [
        "register_broker"]
    assert image.brokers[2].fenced and image.live_brokers() == []
    assert m.heartbeat(hb(2, caught_up=False), image.brokers, 10) == []
    assert commit(image, m.heartbeat(hb(2), image.brokers, 20)) == ["unfence_broker"]
    assert not image.brokers[2].fenced


def test_silence_beyond_the_session_fences_and_a_heartbeat_unfences() -> None:
    image, m = MetadataImage(), Membership(TIMEOUT_MS)
    for node in (1, 2, 3):
        commit(image, m.heartbeat(hb(node), image.brokers, 0))
    commit(image, m.heartbeat(hb(1), image.brokers, 5000))
    commit(image, m.heartbeat(hb(2), image.brokers, 5000))
    assert m.expire(image.brokers, TIMEOUT_MS) == []  # exactly at the limit: still alive
    fenced = m.expire(image.brokers, TIMEOUT_MS + 1)
    assert [(r["type"], r["id"]) for r in fenced] == [("fence_broker", 3)]
    assert m.expire(image.brokers, TIMEOUT_MS + 2) == []  # proposed once
    commit(image, fenced)
    assert [b.node_id for b in image.live_brokers()] == [1, 2]
    assert commit(image, m.heartbeat(hb(3), image.brokers, 12000)) == ["unfence_broker"]
    assert [b.node_id for b in image.live_brokers()] == [1, 2, 3]


def test_restart_registers_the_new_incarnation_and_stale_fences_do_not_apply() -> None:
    image, m = MetadataImage(), Membership(TIMEOUT_MS)
    commit(image, m.heartbeat(hb(1, "old"), image.brokers, 0))
    stale_fence = {"type": "fence_broker", "id": 1, "incarnation": "old"}
    assert commit(image, m.heartbeat(hb(1, "new"), image.brokers, 100)) == ["register_broker"]
    assert image.brokers[1].incarnation == "new" and not image.brokers[1].fenced
    image.apply(stale_fence)  # a fence of the previous process must not fence this one
    assert not image.brokers[1].fenced


def test_controlled_shutdown_fences_at_once_and_stays_fenced() -> None:
    image, m = MetadataImage(), Membership(TIMEOUT_MS)
    commit(image, m.heartbeat(hb(2), image.brokers, 0))
    recs = m.heartbeat(hb(2, shutting_down=True), image.brokers, 50)
    assert [(r["type"], r["reason"]) for r in recs] == [("fence_broker", "controlled shutdown")]
    commit(image, recs)
    # Heartbeats it sends while handing over its leaderships do not unfence it.
    assert m.heartbeat(hb(2), image.brokers, 60) == []
    assert image.live_brokers() == []


def test_new_controller_restarts_every_session() -> None:
    image, m = MetadataImage(), Membership(TIMEOUT_MS)
    for node in (1, 2):
        commit(image, m.heartbeat(hb(node), image.brokers, 0))
    successor = Membership(TIMEOUT_MS)
    successor.restart_sessions(image.brokers, 50_000)
    for now in range(50_000, 50_000 + TIMEOUT_MS + 1, 100):  # checked every tick
        assert successor.expire(image.brokers, now) == []
    assert len(successor.expire(image.brokers, 50_000 + TIMEOUT_MS + 1)) == 2


def test_changed_endpoint_or_rack_re_registers() -> None:
    image, m = MetadataImage(), Membership(TIMEOUT_MS)
    commit(image, m.heartbeat(hb(1), image.brokers, 0))
    assert commit(image, m.heartbeat(hb(1, rack="r1"), image.brokers, 10)) == ["register_broker"]
    assert image.brokers[1].rack == "r1"


def test_an_unregistered_process_stays_fenced_until_it_restarts() -> None:
    image, m = MetadataImage(), Membership(TIMEOUT_MS)
    for node in (1, 2):
        commit(image, m.heartbeat(hb(node), image.brokers, 0))
    commit(image, [{"type": "unregister_broker", "id": 2, "incarnation": "i1"}])
    assert image.brokers[2].fenced and image.brokers[2].retired
    assert [b.node_id for b in image.live_brokers()] == [1] and image.broker_ids() == {1}
    # the same process keeps heartbeating: nothing is proposed, it never unfences
    assert m.heartbeat(hb(2), image.brokers, 100) == []
    assert m.expire(image.brokers, TIMEOUT_MS * 3) == [{"type": "fence_broker", "id": 1,
                                                       "incarnation": "i1",
                                                       "reason": "session expired"}]
    # an unregistration naming an older process changes nothing
    commit(image, [{"type": "unregister_broker", "id": 1, "incarnation": "i0"}])
    assert not image.brokers[1].retired
    # restarted (a new incarnation): registers afresh
    assert commit(image, m.heartbeat(hb(2, "i2"), image.brokers, 200)) == ["register_broker"]
    assert not image.brokers[2].retired and not image.brokers[2].fenced
    assert image.broker_ids() == {1, 2}


def test_checkpoints_keep_unregistered_and_controller_only_registrations() -> None:
    image = MetadataImage()
    for node in (1, 2, 3):
        image.apply({"type": "register_broker", "id": node, "incarnation": f"i{node}",
                     "host": "h", "port": node, "rack": None, "fenced": False,
                     **({"controller_only": True} if node == 3 else {})})
    image.apply({"type": "unregister_broker", "id": 2, "incarnation": "i2"})
    loaded = MetadataImage()
    for entry in broker_entries(image):
        loaded.apply({"type": "register_broker", **entry})
    assert loaded.brokers == image.brokers
    assert loaded.brokers[2].retired and loaded.brokers[3].controller_only


def test_a_stalled_controller_does_not_fence_the_brokers_it_could_not_hear() -> None:
    """The controller's checks run a tick apart; one 20 s apart means the
    controller itself was not running (issue 31: its own heartbeat starved
    behind a busy event loop, and it fenced itself): the time is credited."""
    image, m = MetadataImage(), Membership(TIMEOUT_MS)
    commit(image, m.heartbeat(hb(1), image.brokers, 0))
    commit(image, m.heartbeat(hb(2), image.brokers, 0))
    for now in range(0, 2001, 100):
        assert m.expire(image.brokers, now) == []
    assert m.expire(image.brokers, 22_000) == []  # stalled for 20 s
    assert m.heartbeat(hb(1), image.brokers, 22_050) == []  # read once the loop runs again
    # the silent broker's session goes on from where the stall began (2 s
    # silent before it, 1 s of grace counted): 6 s more
    for now in range(22_100, 28_001, 100):
        assert m.expire(image.brokers, now) == []
    assert commit(image, m.expire(image.brokers, 28_100)) == ["fence_broker"]
    assert m.stalled_ms == 19_000
    assert [b.node_id for b in image.live_brokers()] == [1]


def test_a_shard_registers_its_machine_and_a_snapshot_keeps_it() -> None:
    image, m = MetadataImage(), Membership(TIMEOUT_MS)
    commit(image, m.heartbeat(hb(1), image.brokers, 0))
    commit(image, m.heartbeat(hb(1001, machine="1"), image.brokers, 0))
    assert [(b.node_id, b.machine_id) for b in image.live_brokers()] == [(1, "1"), (1001, "1")]
    again = MetadataImage()
    for entry in broker_entries(image):
        again.apply({"type": "register_broker", **entry})
    assert again.brokers[1001].machine == "1" and again.brokers[1].machine == ""
    # a shard that comes back on another machine registers again
    assert [r["machine"] for r in m.heartbeat(hb(1001, machine="9"), image.brokers, 10)] == ["9"]
