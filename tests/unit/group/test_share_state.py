"""The ``__share_group_state`` log: records, claims and generation fencing, full
snapshots and updates, delete, and junk that changes nothing."""

from __future__ import annotations

import pytest

from kcompat.group.share_partition import (
    AckType,
    RecordState,
    SharePartition,
    ShareState,
    StateBatch,
)
from kcompat.group.share_state import (
    ShareKey,
    ShareStateError,
    ShareStateLog,
    claim_value,
    decode_key,
    delete_value,
    encode_key,
    share_key_string,
    state_from_json,
    state_generation,
    state_to_json,
    state_value,
)

KEY: ShareKey = ("g", "t", 3)
OTHER: ShareKey = ("g", "t", 4)


def acquired_machine() -> SharePartition:
    """Offsets 0-4 acquired by member a (two with a group key), 0 then accepted."""
    sp = SharePartition(0)
    sp.acquire("a", 10, 0, [(0, None), (1, b"k1"), (2, None), (3, b"k\x00"), (4, None)],
               read_end_offset=5)
    sp.acknowledge("a", [(0, 0, [AckType.ACCEPT])], 10)
    return sp


def record(log: ShareStateLog, key: ShareKey, value: bytes) -> None:
    log.apply(encode_key(key), value)


def claim(log: ShareStateLog, key: ShareKey, nonce: str) -> int:
    record(log, key, claim_value(nonce))
    got = log.claimed(key, nonce)
    assert got is not None
    return got[0]


def test_records_round_trip() -> None:
    assert decode_key(encode_key(KEY)) == KEY
    assert share_key_string(KEY) == "g:t:3"
    snap = acquired_machine().snapshot()
    assert snap.group_keys and snap.batches  # the round trip carries both
    assert state_from_json(state_to_json(snap)) == snap
    batch = StateBatch(7, 9, RecordState.AVAILABLE, 2, None, -1, 1234)
    odd = ShareState(7, 10, (batch,), ((8, b"\xff\x00"),))
    assert state_from_json(state_to_json(odd)) == odd


def test_a_claim_raises_the_generation_and_reads_back_the_state() -> None:
    log = ShareStateLog()
    assert claim(log, KEY, "n1") == 1
    assert log.claimed(KEY, "n1") == (1, None)  # no state yet
    snap = acquired_machine().snapshot()
    record(log, KEY, state_value(1, 1, snap, full=True))
    assert claim(log, KEY, "n2") == 2
    assert log.claimed(KEY, "n2") == (2, snap)


def test_a_write_of_an_older_generation_is_ignored() -> None:
    log = ShareStateLog()
    claim(log, KEY, "old")
    first = acquired_machine().snapshot()
    record(log, KEY, state_value(1, 1, first, full=True))
    claim(log, KEY, "new")  # generation 2: the old owner is deposed
    late = ShareState(0, 9, (StateBatch(0, 8, RecordState.ACKNOWLEDGED, 1),))
    record(log, KEY, state_value(1, 2, late, full=True))
    assert log.state(KEY) == first
    record(log, KEY, state_value(3, 1, late, full=True))  # not yet issued either
    assert log.state(KEY) == first
    record(log, KEY, state_value(2, 1, late, full=True))
    assert log.state(KEY) == log.machine(KEY).snapshot() != first  # type: ignore[union-attr]
    assert log.state(KEY).read_offset == 9  # type: ignore[union-attr]


def test_a_full_record_replaces_and_an_update_folds_in() -> None:
    log = ShareStateLog()
    gen = claim(log, KEY, "n")
    sp = acquired_machine()
    record(log, KEY, state_value(gen, 1, sp.snapshot(), full=True))
    sp.take_update()
    sp.acknowledge("a", [(1, 2, [AckType.RELEASE, AckType.REJECT])], 20)
    update = sp.take_update()
    assert update.batches and len(update.batches) < len(sp.snapshot().batches) + 1
    record(log, KEY, state_value(gen, 2, update, full=False))
    assert log.state(KEY) == sp.snapshot()
    fresh = ShareState(100, 100)
    record(log, KEY, state_value(gen, 3, fresh, full=True))
    assert log.state(KEY) == fresh


def test_an_update_without_a_state_starts_one() -> None:
    log = ShareStateLog()
    gen = claim(log, KEY, "n")
    snap = acquired_machine().snapshot()
    record(log, KEY, state_value(gen, 1, snap, full=False))
    assert log.state(KEY) == snap


def test_delete_forgets_the_state_and_fences_its_owner() -> None:
    log = ShareStateLog()
    gen = claim(log, KEY, "n")
    record(log, KEY, state_value(gen, 1, acquired_machine().snapshot(), full=True))
    record(log, OTHER, claim_value("m"))
    record(log, OTHER, state_value(1, 1, ShareState(0, 0), full=True))
    assert log.keys() == [KEY, OTHER] and len(log) == 2
    record(log, KEY, delete_value())
    assert log.state(KEY) is None and log.machine(KEY) is None
    assert log.keys() == [OTHER] and len(log) == 1
    assert log.claimed(KEY, "n") is None  # the owner must claim again
    assert log.generation(KEY) > gen
    record(log, KEY, state_value(gen, 2, ShareState(0, 1), full=True))
    assert log.state(KEY) is None  # the deposed owner's late write
    assert claim(log, KEY, "n2") == log.generation(KEY) > gen + 1
    assert log.claimed(KEY, "n2") == (log.generation(KEY), None)


@pytest.mark.parametrize("raw_key,raw_value", [
    (None, claim_value("x")),
    (b"not json", claim_value("x")),
    (b'["g","t"]', claim_value("x")),
    (b'["g","t","3"]', claim_value("x")),
    (b'[1,"t",3]', claim_value("x")),
    (encode_key(KEY), None),
    (encode_key(KEY), b"{"),
    (encode_key(KEY), b"[]"),
    (encode_key(KEY), b'{"no":"op"}'),
    (encode_key(KEY), b'{"op":"bogus"}'),
    (encode_key(KEY), b'{"op":"state","gen":1,"full":true,"state":{"start":0}}'),
    (encode_key(KEY), b'{"op":"state","gen":1,"full":true,"state":{"start":"x",'
                      b'"read":0,"batches":[],"keys":[]}}'),
    (encode_key(KEY), b'{"op":"state","gen":1,"full":true,"state":{"start":0,'
                      b'"read":1,"batches":[[0,0,9,1,null,-1,-1]],"keys":[]}}'),
    # junk of the right shape but bad values (the host catches ShareStateError
    # only: anything else would stop the replicated machine)
    pytest.param(encode_key(KEY), b'{"op":"state","gen":"x"}'),
    pytest.param(encode_key(KEY), b'{"op":"state","gen":null}'),
    pytest.param(encode_key(KEY), b'{"op":"state","gen":1,"full":true,"state":{"start":0,'
                                  b'"read":1,"batches":[[0,5,1,1,null,-1,-1]],"keys":[]}}'),
])
def test_junk_raises_and_changes_nothing(raw_key: bytes | None,
                                         raw_value: bytes | None) -> None:
    log = ShareStateLog()
    claim(log, KEY, "n")
    snap = acquired_machine().snapshot()
    record(log, KEY, state_value(1, 1, snap, full=True))
    with pytest.raises(ShareStateError):
        log.apply(raw_key, raw_value)
    assert log.claimed(KEY, "n") == (1, snap)
    assert log.keys() == [KEY]


def test_claimed_answers_only_the_latest_nonce() -> None:
    log = ShareStateLog()
    assert log.claimed(KEY, "a") is None  # nothing applied yet
    record(log, KEY, claim_value("a"))
    record(log, KEY, claim_value("b"))
    assert log.claimed(KEY, "a") is None
    assert log.claimed(KEY, "b") == (2, None)
    assert log.claimed(OTHER, "b") is None


def test_an_update_after_a_lost_one_is_ignored_until_the_next_claim() -> None:
    """Updates are deltas: when write 2 of an owner is lost, write 3 must not
    be folded onto write 1 (its offsets would look like gaps); the key keeps
    write 1's state, and the owner's next claim continues from there."""
    log = ShareStateLog()
    gen = claim(log, KEY, "n")
    sp = SharePartition(0)
    record(log, KEY, state_value(gen, 1, sp.snapshot(), full=True))
    sp.take_update()
    sp.acquire("a", 5, 0, [(o, None) for o in range(5)], read_end_offset=5)
    sp.take_update()  # write 2: lost
    sp.acknowledge("a", [(0, 4, [AckType.RELEASE])], 10)
    record(log, KEY, state_value(gen, 3, sp.take_update(), full=False))
    assert log.state(KEY) == ShareState(0, 0)
    gen = claim(log, KEY, "n2")
    assert log.claimed(KEY, "n2") == (gen, ShareState(0, 0))
    record(log, KEY, state_value(gen, 1, sp.snapshot(), full=True))
    assert log.state(KEY) == sp.snapshot()


def test_state_generation_names_the_writer_of_state_records_only() -> None:
    snap = acquired_machine().snapshot()
    assert state_generation(encode_key(KEY), state_value(4, 1, snap, full=False)) == (KEY, 4)
    for other in (claim_value("n"), delete_value(), b"junk", b'{"op":"state","gen":"4"}'):
        with pytest.raises(ShareStateError):
            state_generation(encode_key(KEY), other)


def test_an_initial_snapshot_is_unsettled_until_a_record_is_given_back_or_finished() -> None:
    """Kafka reports no start offset for a share-partition until a record of
    it was acknowledged, released or timed out (DescribeShareGroupOffsets)."""
    log = ShareStateLog()
    gen = claim(log, KEY, "n")
    sp = SharePartition(3)
    record(log, KEY, state_value(gen, 1, sp.snapshot(), full=True, initial=True))
    assert not log.settled(KEY)
    sp.acquire("a", 2, 0, [(3, None), (4, None)], read_end_offset=5)
    record(log, KEY, state_value(gen, 2, sp.take_update(), full=False))
    assert not log.settled(KEY)  # acquired only
    claim(log, KEY, "n2")  # a failover keeps it unsettled
    assert not log.settled(KEY)
    sp.acknowledge("a", [(4, 4, [AckType.RELEASE])], 10)
    record(log, KEY, state_value(gen + 1, 1, sp.take_update(), full=False))
    assert log.settled(KEY)
    assert log.settled(OTHER)  # no state at all: nothing to hide
