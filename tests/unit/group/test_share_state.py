"""The ``__share_group_state`` log: records, claims and generation fencing, full
snapshots and updates, delete, and junk that changes nothing; and its
compaction: a replay from ``needed_offset`` ends where the whole history does."""

from __future__ import annotations

import random
import weakref
from typing import Any

import pytest

from kcompat.broker.groups.share_compaction import snapshot_records
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


# keyed by the log itself, weakly: an ``id`` is reused once a finished test's log is
# freed, and a new log would then count on from the old one's offsets
_NEXT_OFFSET: weakref.WeakKeyDictionary[ShareStateLog, int] = weakref.WeakKeyDictionary()


def next_offset(log: ShareStateLog) -> int:
    """The offset of the log's next record (the logs of a test count from 0)."""
    offset = _NEXT_OFFSET.get(log, 0)
    _NEXT_OFFSET[log] = offset + 1
    return offset


def record(log: ShareStateLog, key: ShareKey, value: bytes) -> None:
    log.apply(encode_key(key), value, next_offset(log))


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
    assert claim(log, KEY, "n1") == 1  # the claim's offset (0) plus one
    assert log.claimed(KEY, "n1") == (1, None)  # no state yet
    snap = acquired_machine().snapshot()
    record(log, KEY, state_value(1, 1, snap, full=True))
    assert claim(log, KEY, "n2") == 3  # at offset 2
    assert log.claimed(KEY, "n2") == (3, snap)


def test_a_claim_for_another_topic_id_drops_the_state() -> None:
    """The topic was deleted and re-created under its name: the claim names
    the new id (``n@id``) and the old topic's state is not carried over; a
    claim naming the same id, or none, keeps it."""
    log = ShareStateLog()
    generation = claim(log, KEY, "n1@old")
    snap = acquired_machine().snapshot()
    record(log, KEY, state_value(generation, 1, snap, full=True))
    assert log.claimed(KEY, "n1@old") == (generation, snap)
    kept = claim(log, KEY, "n2@old")
    assert log.claimed(KEY, "n2@old") == (kept, snap)
    kept = claim(log, KEY, "n3")  # AlterShareGroupOffsets claims without an id
    assert log.claimed(KEY, "n3") == (kept, snap)
    kept = claim(log, KEY, "n4@old")
    assert log.claimed(KEY, "n4@old") == (kept, snap)
    assert log.topic_of(KEY) == "old"  # what a read reports with the state
    fresh = claim(log, KEY, "n5@new")
    assert log.claimed(KEY, "n5@new") == (fresh, None)
    assert log.topic_of(KEY) == "new" and log.topic_of(OTHER) == ""


def test_a_claim_of_the_old_format_raises_the_generation_by_one() -> None:
    log = ShareStateLog()
    old = b'{"op":"claim","nonce":"a"}'
    record(log, OTHER, claim_value("x"))
    record(log, KEY, old)
    assert log.claimed(KEY, "a") == (1, None)
    record(log, KEY, b'{"op":"claim","nonce":"b"}')
    assert log.claimed(KEY, "b") == (2, None)
    assert claim(log, KEY, "c") == 4


def test_a_write_of_an_older_generation_is_ignored() -> None:
    log = ShareStateLog()
    old = claim(log, KEY, "old")
    first = acquired_machine().snapshot()
    record(log, KEY, state_value(old, 1, first, full=True))
    new = claim(log, KEY, "new")  # the old owner is deposed
    assert new > old
    late = ShareState(0, 9, (StateBatch(0, 8, RecordState.ACKNOWLEDGED, 1),))
    record(log, KEY, state_value(old, 2, late, full=True))
    assert log.state(KEY) == first
    record(log, KEY, state_value(new + 1, 1, late, full=True))  # not issued either
    assert log.state(KEY) == first
    record(log, KEY, state_value(new, 1, late, full=True))
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
    other = claim(log, OTHER, "m")
    record(log, OTHER, state_value(other, 1, ShareState(0, 0), full=True))
    assert log.keys() == [KEY, OTHER] and len(log) == 2
    record(log, KEY, delete_value())
    assert log.state(KEY) is None and log.machine(KEY) is None
    assert log.keys() == [OTHER] and len(log) == 1
    assert log.claimed(KEY, "n") is None  # the owner must claim again
    assert log.generation(KEY) == 0 != gen  # no entry at all: any writer is fenced
    record(log, KEY, state_value(gen, 2, ShareState(0, 1), full=True))
    record(log, KEY, state_value(0, 1, ShareState(0, 1), full=True))
    assert log.state(KEY) is None  # the deposed owner's late write; no generation 0
    assert log.entry_count == 1  # a state record makes no entry
    assert claim(log, KEY, "n2") == log.generation(KEY) > gen
    assert log.claimed(KEY, "n2") == (log.generation(KEY), None)


def test_a_delete_naming_a_topic_id_spares_a_key_claimed_for_a_newer_topic() -> None:
    """The deleted-topic sweep's ``delete`` names the id it saw: it deletes a
    key whose latest claim named that id, or none; a key a claim for a topic
    re-created under the name reached first is kept."""
    log = ShareStateLog()
    gen = claim(log, KEY, "n1@old")
    record(log, KEY, state_value(gen, 1, acquired_machine().snapshot(), full=True))
    claim(log, OTHER, "m1")  # a claim naming no id
    third: ShareKey = ("g", "t", 5)
    claim(log, third, "p1@new")
    for key in (KEY, OTHER, third):
        record(log, key, delete_value("old"))
    assert log.entry_keys() == [third] and log.topic_of(third) == "new"
    assert log.generation(KEY) == 0 and log.claimed(KEY, "n1@old") is None


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
        log.apply(raw_key, raw_value, 2)
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


def test_counted_tells_a_writer_whether_its_applied_record_was_folded_in() -> None:
    """What the state partition's leader answers a committed write
    (``ShareService.check_committed``): a record counted while its
    generation holds and the key's sequence reached it; not when a claim
    came before it (a deposed holder's late write), after a lost one, or
    once the key was claimed again or deleted."""
    log = ShareStateLog()
    snap = acquired_machine().snapshot()
    old = claim(log, KEY, "n1")
    record(log, KEY, state_value(old, 1, snap, full=True))
    assert log.counted(KEY, old, 1)
    assert not log.counted(KEY, old, 2)  # not applied yet
    new = claim(log, KEY, "n2")  # the claim lands first: the late write is ignored
    record(log, KEY, state_value(old, 2, snap, full=False))
    assert not log.counted(KEY, old, 2) and not log.counted(KEY, old, 1)
    record(log, KEY, state_value(new, 2, snap, full=False))  # a gap: a write was lost
    assert not log.counted(KEY, new, 2)
    record(log, KEY, state_value(new, 1, snap, full=True))
    record(log, KEY, state_value(new, 2, snap, full=False))
    assert log.counted(KEY, new, 1) and log.counted(KEY, new, 2)
    record(log, KEY, delete_value())
    assert not log.counted(KEY, new, 2)
    assert not log.counted(OTHER, 1, 1)


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
    gen = claim(log, KEY, "n2")  # a failover keeps it unsettled
    assert not log.settled(KEY)
    sp.acknowledge("a", [(4, 4, [AckType.RELEASE])], 10)
    record(log, KEY, state_value(gen, 1, sp.take_update(), full=False))
    assert log.settled(KEY)
    assert log.settled(OTHER)  # no state at all: nothing to hide


# -- compaction: snapshots, needed_offset, and replays from the cut -------------------------


def test_a_key_is_due_after_its_updates_and_its_snapshot_moves_the_needed_offset() -> None:
    log = ShareStateLog(updates_per_snapshot=3)
    gen = claim(log, KEY, "n")  # offset 0: the record the key is rebuilt from
    other = claim(log, OTHER, "m")  # offset 1
    assert log.needed_offset(2) == 0 and list(log.pinning(1)) == [KEY]
    sp = SharePartition(0)
    for seq in (1, 2):
        sp.acquire("a", 1, seq, [(seq - 1, None)], read_end_offset=seq)
        record(log, KEY, state_value(gen, seq, sp.take_update(), full=False))
    assert list(log.due()) == [] and not log.has_due
    record(log, KEY, state_value(gen, 3, sp.take_update(), full=True))
    assert list(log.due()) == [KEY]
    value = log.snapshot_value(KEY)
    assert value is not None
    before = log.digest()
    record(log, KEY, value)  # offset 5
    assert log.digest() == before and list(log.due()) == []
    assert log.needed_offset(6) == 1  # OTHER's claim
    assert list(log.pinning(6)) == [OTHER, KEY]  # oldest first
    record(log, OTHER, delete_value())
    assert log.needed_offset(7) == 5
    assert claim(log, OTHER, "m2") == 8 != other
    assert log.needed_offset(8) == 5 and log.snapshot_value(("g", "t", 99)) is None
    fresh = ShareStateLog()
    for offset, raw in ((5, value), (7, claim_value("m2"))):
        fresh.apply(encode_key(KEY if offset == 5 else OTHER), raw, offset)
    assert fresh.digest() == log.digest()


@pytest.mark.parametrize("raw_value", [
    b'{"op":"snapshot","gen":1,"seq":0,"owner":null,"settled":true,"initial":-1}',
    b'{"op":"snapshot","gen":"1","seq":0,"owner":null,"settled":true,"initial":-1,'
    b'"state":null}',
    b'{"op":"snapshot","gen":1,"seq":0,"owner":3,"settled":true,"initial":-1,"state":null}',
    b'{"op":"snapshot","gen":1,"seq":0,"owner":null,"settled":1,"initial":-1,"state":null}',
    b'{"op":"snapshot","gen":1,"seq":0,"owner":null,"settled":true,"initial":-1,'
    b'"state":{"start":5,"read":1,"batches":[],"keys":[]}}',
])
def test_a_bad_snapshot_raises_and_changes_nothing(raw_value: bytes) -> None:
    log = ShareStateLog()
    claim(log, KEY, "n")
    before = log.digest()
    with pytest.raises(ShareStateError):
        log.apply(encode_key(KEY), raw_value, 1)
    assert log.digest() == before


class _Holder:
    """A data partition's leader writing a key's state (``broker.shares``)."""

    def __init__(self, key: ShareKey, nonce: str, generation: int,
                 machine: SharePartition) -> None:
        self.key, self.nonce, self.generation, self.machine = key, nonce, generation, machine
        self.seq = 0
        self.members = ["a", "b"]


class _Run:
    """A seeded history of one state partition: claims (both formats),
    updates and full writes, lost writes, a deposed holder's late writes,
    deletes, junk, and the leader's snapshots folded over an unapplied tail
    (``share_compaction.snapshot_records``); at random points the cut the leader
    would prune at (``needed_offset`` of what it applied) and the state then."""

    KEYS: tuple[ShareKey, ...] = tuple((f"g{i % 2}", "t", i) for i in range(5))

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.records: list[tuple[bytes | None, bytes | None]] = []
        self.snapshot_at: set[int] = set()
        self.every = self.rng.choice([1, 2, 5, 20])
        self.log = ShareStateLog(self.every)
        self.applied = 0
        self.holders: dict[ShareKey, _Holder] = {}
        self.deposed: list[_Holder] = []
        self.data_end = dict.fromkeys(self.KEYS, 0)
        self.now_ms = 0
        self.cuts: list[tuple[int, int, dict[ShareKey, tuple[Any, ...]]]] = []
        self.counted: set[ShareKey] = set()  # keys with a claim of the old format

    def append(self, key: ShareKey | None, value: bytes | None) -> None:
        self.records.append((b"junk" if key is None else encode_key(key), value))

    def apply_to(self, end: int) -> None:
        for offset in range(self.applied, end):
            try:
                self.log.apply(*self.records[offset], offset)
            except ShareStateError:
                pass
        self.applied = max(self.applied, end)

    def step(self, i: int) -> None:
        rng = self.rng
        key = rng.choice(self.KEYS)
        op = rng.random()
        if op < 0.10 or (key not in self.holders and op < 0.5):
            self.claim(key, f"n{i}")
        elif op < 0.55 and key in self.holders:
            self.work(self.holders[key])
        elif op < 0.60 and self.deposed:
            self.late_write(rng.choice(self.deposed))
        elif op < 0.63:
            self.append(key, delete_value())
            if key in self.holders:
                self.deposed.append(self.holders.pop(key))
        elif op < 0.78:
            self.snapshots(rng.random() < 0.5)
        elif op < 0.80:
            self.append(rng.choice([key, None]), rng.choice([b"junk", b'{"op":"snapshot"}']))
        elif op < 0.92:
            self.apply_to(rng.randint(self.applied, len(self.records)))
        else:
            self.cuts.append((self.log.needed_offset(self.applied), self.applied,
                              self.log.digest()))

    def late_write(self, late: _Holder) -> None:
        """A deposed holder's write changes nothing (unless an old-format
        claim, which counts generations, came after a delete: its generation
        may come back)."""
        self.apply_to(len(self.records))
        before = self.log.digest().get(late.key)
        late.seq = self.log.digest().get(late.key, (0, None, 0))[2]  # the next one
        late.seq += 1
        self.append(late.key, state_value(late.generation, late.seq, late.machine.snapshot(),
                                          full=self.rng.random() < 0.5))
        self.apply_to(len(self.records))
        if late.key not in self.counted:
            assert self.log.digest().get(late.key) == before

    def claim(self, key: ShareKey, nonce: str) -> None:
        old_format = self.rng.random() < 0.1
        if old_format:
            self.counted.add(key)
        self.append(key, b'{"op":"claim","nonce":"%s"}' % nonce.encode() if old_format
                    else claim_value(nonce))
        self.apply_to(len(self.records))  # a claimer waits for its claim to apply
        got = self.log.claimed(key, nonce)
        assert got is not None
        if key in self.holders:
            self.deposed.append(self.holders[key])
        generation, state = got
        if state is None:
            holder = _Holder(key, nonce, generation, SharePartition(self.data_end[key] // 2))
            holder.seq = 1
            self.append(key, state_value(generation, 1, holder.machine.snapshot(), full=True,
                                         initial=True))
            holder.machine.take_update()
        else:
            holder = _Holder(key, nonce, generation, SharePartition.restore(state))
        self.holders[key] = holder

    def work(self, holder: _Holder) -> None:
        rng, sp = self.rng, holder.machine
        self.now_ms += rng.randint(0, 20000)
        action = rng.random()
        if action < 0.4:
            self.data_end[holder.key] += rng.randint(0, 6)
            end = self.data_end[holder.key]
            sp.acquire(rng.choice(holder.members), rng.randint(1, 5), self.now_ms,
                       [(o, rng.choice([None, b"k1", b"k2"])) for o in range(sp.read_offset, end)],
                       read_end_offset=end)
        elif action < 0.8:
            held = [o for o in range(sp.start_offset, sp.read_offset)
                    if (r := sp.record(o)) is not None and r.state is RecordState.ACQUIRED]
            if held:
                offset = rng.choice(held)
                member = sp.record(offset).member_id  # type: ignore[union-attr]
                assert member is not None
                sp.acknowledge(member, [(offset, offset, [rng.choice(
                    [AckType.ACCEPT, AckType.RELEASE, AckType.REJECT])])], self.now_ms)
        elif action < 0.9:
            sp.release_member(rng.choice(holder.members), self.now_ms)
        else:
            sp.tick(self.now_ms)
        full = rng.random() < 0.1
        if not full and not sp.has_update:
            return
        state = sp.snapshot() if full else sp.take_update()
        if full:
            sp.take_update()
        holder.seq += 1
        if rng.random() < 0.05:
            return  # lost: its later updates are ignored until the next claim
        self.append(holder.key, state_value(holder.generation, holder.seq, state, full))

    def snapshots(self, cold: bool) -> None:
        """What the leader appends: due keys, or those pinning the prefix."""
        mark = self.rng.randint(0, self.applied)
        keys = list(self.log.pinning(mark) if cold else self.log.due())
        tail = [(o, decode_key(k), k, v) for o, (k, v) in enumerate(self.records)
                if o >= self.applied and k != b"junk"]
        for key, value in snapshot_records(self.log, keys, tail):
            self.snapshot_at.add(len(self.records))
            self.append(key, value)


def replay(records: list[tuple[bytes | None, bytes | None]], start: int, end: int,
           log: ShareStateLog | None = None, skip: set[int] | None = None) -> ShareStateLog:
    log = log if log is not None else ShareStateLog()
    for offset in range(start, end):
        if skip is None or offset not in skip:
            try:
                log.apply(*records[offset], offset)
            except ShareStateError:
                pass
    return log


@pytest.mark.parametrize("seed", range(40))
def test_a_replay_from_the_cut_ends_as_the_whole_history_does(seed: int) -> None:
    """Generations, owners, sequence numbers, settled flags, initial starts
    and machines: from every cut the leader could have pruned at, the same
    state at the point it was computed and at the end — and the snapshots
    change nothing a replay without them ends with."""
    run = _Run(seed)
    for i in range(400):
        run.step(i)
    run.apply_to(len(run.records))
    final = run.log.digest()
    assert final == replay(run.records, 0, len(run.records)).digest()
    assert final == replay(run.records, 0, len(run.records), skip=run.snapshot_at).digest()
    assert any(cut > 0 for cut, _p, _d in run.cuts), "the history never became prunable"
    checked = random.Random(seed).sample(run.cuts, min(len(run.cuts), 6))
    checked.append((run.log.needed_offset(run.applied), run.applied, final))
    for cut, point, state in checked:
        assert cut <= point
        partial = replay(run.records, cut, point)
        assert partial.digest() == state, (seed, cut, point)
        assert replay(run.records, point, len(run.records), partial).digest() == final
