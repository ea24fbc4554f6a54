"""The share-partition state log (``__share_group_state``), sans-IO.

Theory of operation
-------------------
Kafka keeps each share-partition's durable state with its share coordinator
in ``__share_group_state``; kcompat does the same with one replicated state
machine per partition of that topic (``ShareStateLog``), fed every committed
record by the replication host, so a new leader of a state partition already
holds what it must answer. Records are keyed by (share group, topic,
partition) — a *share key* — and come in four kinds (JSON values):

* ``claim`` with a nonce: the data partition's leader takes the key over
  (after it starts leading the partition, or after a failed write). Applying
  it sets the key's **generation** to the claim's own offset plus one (a
  claim of the old format, without ``"v": 2``, raised it by one) and names
  the nonce as its owner; the leader reads the state back (``claimed``) once
  its claim is applied, and from then on writes with that generation. A
  nonce may end in ``@<topic id>``: a claim naming another topic id than the
  previous one (the topic was deleted and re-created under its name: Kafka
  keys share-partitions by topic id) drops the key's state.
* ``state``: a full snapshot (``full``) or an update (``SharePartition.
  take_update``) written by the owner, with its generation and a sequence
  number (1, 2, ... after each claim). A record of another generation — a
  deposed leader's late write — is ignored, and so is one whose sequence
  number does not follow the last applied one (or for a key with no entry):
  an update is a delta on top of the previous one, so after a lost write (a
  timeout across a leader change) the key keeps the last consistent state,
  and its owner, told of the failure, claims again from there.
* ``delete``: the share group's state for the partition is gone (the group
  or its offsets were deleted; with ``tid``, its topic was: then only an
  entry whose latest claim named that topic id, or none, goes, not one a claim
  for a topic re-created under the name came to meanwhile): the key's entry goes, generation and all, so
  the leader that held it (generation >= 1, never 0) is fenced — it drops its
  machine when it applies this record as a replica, or claims again after
  its next failed write.
* ``snapshot``: the whole entry of a key — generation, owner, sequence
  number, settled flag, initial start and state (Kafka's ShareSnapshot; its
  ``state`` records are ShareUpdates) — written by the state partition's
  leader (``broker.share_compaction``). Applying one replaces the entry.

Every replica folds the records into a ``SharePartition`` per key (its
``restore`` and ``apply``), which is exactly what the owner had when it wrote
them. Junk records (not JSON, unknown kinds) are logged by the host and
skipped: the log is internal, but a bad record must not stop the machine.

**Bounded by what is live.** Each entry remembers ``since``: the offset of
the record from which the key's records alone rebuild it — its last
``snapshot``, or the ``claim`` that created it. Every record kind is a
function of (the entry before, the record, its offset), and the record at
``since`` ignores the entry before (a snapshot replaces it; a claim found
none, and a replay from a later start finds none either: only claims and
snapshots create an entry, and a ``delete`` in between is replayed too). So
a replay that starts at any offset at or below every entry's ``since``
(``needed_offset``, Kafka's "last redundant offset") ends with the same
entries as a replay of the whole history — records of a key before its
``since`` may fold into garbage there, but the record at ``since`` wipes it
— and a key without an entry needs nothing: its deletion (or its absence)
is what an absent entry means, and a later claim's generation is its offset,
not a count of the history. Hence the host may drop the log prefix below
``needed_offset`` once it is applied: a restarted replica, or a follower
handed the new log start (``restore``), starts empty and replays from there.

A ``snapshot`` record is a copy of what the entry already is where it lands
(the leader folds the records of its key still in flight between what it
applied and the log end into it, and appends it with nothing in between), so
it changes no outcome; it only moves ``since`` to the log end. The leader
writes one for a key after ``updates_per_snapshot`` records changed it
(``due``; Kafka's ``share.coordinator.snapshot.update.records.per.snapshot``)
and for keys that pin the prefix (``pinning``). Entries are kept in order of
``since`` (a key whose ``since`` moves goes to the back), so the oldest is
first: ``needed_offset`` and ``pinning`` cost what they return, not a scan
of every key.

Pure and deterministic: no clock, no I/O.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import takewhile
from typing import Any

from kcompat.group.share_partition import RecordState, SharePartition, ShareState, StateBatch

SHARE_STATE_TOPIC = "__share_group_state"
# Kafka's share.coordinator.snapshot.update.records.per.snapshot default
UPDATES_PER_SNAPSHOT = 500

ShareKey = tuple[str, str, int]  # share group, topic, partition


def share_key_string(key: ShareKey) -> str:
    """Kafka's share-coordinator key form ``group:topic:partition`` (it uses
    the topic id; kcompat the name), hashed to pick the state partition."""
    return f"{key[0]}:{key[1]}:{key[2]}"


class ShareStateError(ValueError):
    """A record of the state log that cannot be read."""


# -- records ----------------------------------------------------------------------------


def encode_key(key: ShareKey) -> bytes:
    return json.dumps(list(key), separators=(",", ":")).encode()


def decode_key(raw: bytes | None) -> ShareKey:
    try:
        group, topic, partition = json.loads(raw or b"")
    except (ValueError, TypeError) as e:
        raise ShareStateError(f"bad share-state key {raw!r}") from e
    if not (isinstance(group, str) and isinstance(topic, str) and isinstance(partition, int)):
        raise ShareStateError(f"bad share-state key {raw!r}")
    return group, topic, partition


def claim_value(nonce: str) -> bytes:
    """A claim whose generation is its offset plus one."""
    return _dump({"op": "claim", "nonce": nonce, "v": 2})


def state_value(generation: int, seq: int, state: ShareState, full: bool,
                initial: bool = False) -> bytes:
    """``initial``: the snapshot a leader starts a new key with (at
    ``share.auto.offset.reset``), which Kafka does not report as a start
    offset until a record of it is acknowledged, released or timed out."""
    value: dict[str, Any] = {"op": "state", "gen": generation, "seq": seq, "full": full,
                             "state": state_to_json(state)}
    if initial:
        value["initial"] = True
    return _dump(value)


def delete_value(topic_id: str | None = None) -> bytes:
    """A ``delete``; with ``topic_id``, it deletes only an entry whose latest
    claim named that id (or none): a key of a deleted topic, not of the topic
    re-created under its name meanwhile."""
    return _dump({"op": "delete"} if topic_id is None else {"op": "delete", "tid": topic_id})


def state_generation(raw_key: bytes | None, raw_value: bytes | None) -> tuple[ShareKey, int]:
    """(key, generation) of a ``state`` record; ShareStateError for any other."""
    key = decode_key(raw_key)
    try:
        value = json.loads(raw_value or b"")
        generation = value["gen"] if value.get("op") == "state" else None
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise ShareStateError(f"not a share-state record for {key}") from e
    if not isinstance(generation, int):
        raise ShareStateError(f"not a share-state record for {key}")
    return key, generation


def read_record(raw_key: bytes | None, raw_value: bytes | None
                ) -> tuple[ShareKey, dict[str, Any]]:
    """(key, value) of a record, its value an object naming its ``op``;
    ShareStateError for junk."""
    key = decode_key(raw_key)
    return key, _load(key, raw_value)


def state_to_json(state: ShareState) -> dict[str, Any]:
    return {
        "start": state.start_offset,
        "read": state.read_offset,
        "batches": [[b.first_offset, b.last_offset, int(b.state), b.delivery_count,
                     b.member_id, b.lock_deadline_ms, b.not_before_ms] for b in state.batches],
        "keys": [[offset, base64.b64encode(key).decode()] for offset, key in state.group_keys],
        "starts": list(state.batch_starts),
    }


def state_from_json(data: dict[str, Any]) -> ShareState:
    try:
        batches = tuple(StateBatch(int(f), int(last), RecordState(int(s)), int(dc),
                                   member, int(deadline), int(not_before))
                        for f, last, s, dc, member, deadline, not_before in data["batches"])
        keys = tuple((int(offset), base64.b64decode(key)) for offset, key in data["keys"])
        starts = tuple(int(offset) for offset in data.get("starts", ()))
        state = ShareState(int(data["start"]), int(data["read"]), batches, keys, starts)
    except (KeyError, ValueError, TypeError) as e:
        raise ShareStateError(f"bad share state: {e}") from e
    if not 0 <= state.start_offset <= state.read_offset or any(
            not b.first_offset <= b.last_offset < state.read_offset for b in batches) or any(
            offset >= state.read_offset for offset, _ in keys):
        raise ShareStateError("bad share state: offsets outside its window")
    return state


def _dump(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _load(key: ShareKey, raw_value: bytes | None) -> dict[str, Any]:
    try:
        value = json.loads(raw_value or b"")
        if not isinstance(value, dict):
            raise TypeError("not an object")
        value["op"]  # noqa: B018 - every record names its kind
    except (ValueError, TypeError, KeyError) as e:
        raise ShareStateError(f"bad share-state value for {key}") from e
    return value


def _int(value: dict[str, Any], name: str, what: str) -> int:
    found = value.get(name)
    if not isinstance(found, int) or isinstance(found, bool):
        raise ShareStateError(f"bad share-state {what} {found!r}")
    return found


# -- the machine --------------------------------------------------------------------------


@dataclass(slots=True)
class _Entry:
    generation: int = 0
    owner: str | None = None
    machine: SharePartition | None = None
    seq: int = 0  # of the last state record applied in this generation
    initial_start: int = -1  # the start offset of an ``initial`` snapshot
    settled: bool = True  # a record was finished or given back since it
    since: int = 0  # the record the key's records alone rebuild this entry from
    updates: int = 0  # records that changed it since then


def _snapshot_entry(key: ShareKey, value: dict[str, Any], offset: int) -> _Entry:
    owner, settled, raw = value.get("owner"), value.get("settled"), value.get("state")
    if not (owner is None or isinstance(owner, str)) or not isinstance(settled, bool) or not (
            raw is None or isinstance(raw, dict)) or "state" not in value:
        raise ShareStateError(f"bad share-state snapshot for {key}")
    machine = None if raw is None else SharePartition.restore(state_from_json(raw))
    return _Entry(_int(value, "gen", "generation"), owner, machine,
                  _int(value, "seq", "sequence number"), _int(value, "initial", "initial start"),
                  settled, since=offset)


class ShareStateLog:
    """The folded state of one ``__share_group_state`` partition."""

    def __init__(self, updates_per_snapshot: int = UPDATES_PER_SNAPSHOT) -> None:
        # in order of ``since``: the first entry is the oldest one
        self._entries: dict[ShareKey, _Entry] = {}
        self._due: dict[ShareKey, None] = {}  # changed often enough for a snapshot
        self._updates_per_snapshot = max(1, updates_per_snapshot)

    def __len__(self) -> int:
        return sum(1 for e in self._entries.values() if e.machine is not None)

    def keys(self) -> list[ShareKey]:
        return sorted(k for k, e in self._entries.items() if e.machine is not None)

    @property
    def has_due(self) -> bool:
        """Some key is due a snapshot (``due``)."""
        return bool(self._due)

    @property
    def entry_count(self) -> int:
        """Keys with an entry (a state, or only a claim)."""
        return len(self._entries)

    def apply(self, raw_key: bytes | None, raw_value: bytes | None, offset: int) -> ShareKey:
        """One committed record (its key) at ``offset``; ShareStateError for
        junk (nothing changed)."""
        key, value = read_record(raw_key, raw_value)
        op = value["op"]
        if op == "claim":
            self._claim(key, value, offset)
        elif op == "state":
            self._state(key, value)
        elif op == "delete":
            entry = self._entries.get(key)
            tid = value.get("tid")
            if entry is not None and tid is not None and _topic_of(entry.owner) not in ("", tid):
                return key  # the key was claimed for a newer topic of the name: kept
            self._entries.pop(key, None)
            self._due.pop(key, None)
        elif op == "snapshot":
            entry = _snapshot_entry(key, value, offset)
            self._entries.pop(key, None)
            self._entries[key] = entry  # to the back: the newest ``since``
            self._due.pop(key, None)
        else:
            raise ShareStateError(f"unknown share-state record kind {op!r}")
        return key

    def _claim(self, key: ShareKey, value: dict[str, Any], offset: int) -> None:
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(since=offset)
        else:
            self._changed(key, entry)
        nonce = str(value.get("nonce"))
        was, now = _topic_of(entry.owner), _topic_of(nonce)
        if was and now and was != now:  # the topic was deleted and re-created
            entry.machine, entry.initial_start, entry.settled = None, -1, True
        entry.generation = offset + 1 if value.get("v") == 2 else entry.generation + 1
        entry.owner = nonce
        entry.seq = 0

    def _state(self, key: ShareKey, value: dict[str, Any]) -> None:
        generation = _int(value, "gen", "generation")
        seq = _int(value, "seq", "sequence number")
        state = state_from_json(value.get("state") or {})
        entry = self._entries.get(key)
        if entry is None or generation != entry.generation or seq != entry.seq + 1:
            return  # a deposed owner's write, or one after a lost write
        entry.seq = seq
        if value.get("full") or entry.machine is None:
            entry.machine = SharePartition.restore(state)
        else:
            entry.machine.apply(state)
        if value.get("initial"):
            entry.initial_start, entry.settled = state.start_offset, False
        elif not entry.settled:
            entry.settled = _settles(state, entry.initial_start)
        self._changed(key, entry)

    def _changed(self, key: ShareKey, entry: _Entry) -> None:
        entry.updates += 1
        if entry.updates >= self._updates_per_snapshot:
            self._due[key] = None

    # -- reading ------------------------------------------------------------------------

    def generation(self, key: ShareKey) -> int:
        entry = self._entries.get(key)
        return 0 if entry is None else entry.generation

    def claimed(self, key: ShareKey, nonce: str) -> tuple[int, ShareState | None] | None:
        """(generation, state or None if the key has none) once the claim with
        ``nonce`` is the key's latest; None if it is not (not applied yet, or
        another claim came after it)."""
        entry = self._entries.get(key)
        if entry is None or entry.owner != nonce:
            return None
        return entry.generation, (None if entry.machine is None else entry.machine.snapshot())

    def counted(self, key: ShareKey, generation: int, seq: int) -> bool:
        """Whether the ``state`` record (``generation``, ``seq``) of ``key``,
        applied, counted: the entry is still of that generation and its
        sequence number reached ``seq`` (they follow one by one, so the
        record was folded in). False when it was ignored — a claim applied
        before it (a deposed holder's write) or a lost write before it — and
        when the key was claimed again or deleted since: its writer is fenced
        either way and must claim again."""
        entry = self._entries.get(key)
        return entry is not None and entry.generation == generation and entry.seq >= seq

    def settled(self, key: ShareKey) -> bool:
        """False while the key holds only its initial snapshot and
        acquisitions: Kafka reports no start offset for it yet."""
        entry = self._entries.get(key)
        return entry is None or entry.settled

    def entry_keys(self) -> list[ShareKey]:
        """Every key with an entry (a copy, at C speed), oldest first."""
        return list(self._entries)

    def topic_of(self, key: ShareKey) -> str:
        """The topic id the key's latest claim named ("" if none did)."""
        entry = self._entries.get(key)
        return "" if entry is None else _topic_of(entry.owner)

    def state(self, key: ShareKey) -> ShareState | None:
        entry = self._entries.get(key)
        return None if entry is None or entry.machine is None else entry.machine.snapshot()

    def machine(self, key: ShareKey) -> SharePartition | None:
        """The folded machine (read only: for describe and offsets)."""
        entry = self._entries.get(key)
        return None if entry is None else entry.machine

    def digest(self) -> dict[ShareKey, tuple[Any, ...]]:
        """Everything the log holds per key, to compare two replicas."""
        return {k: (e.generation, e.owner, e.seq, e.settled, e.initial_start,
                    None if e.machine is None else e.machine.snapshot())
                for k, e in sorted(self._entries.items())}

    # -- compaction (at the leader: ``broker.share_compaction``) -----------------------------

    def needed_offset(self, applied: int) -> int:
        """The lowest offset a replay must start at to rebuild this state, the
        log applied up to ``applied``: the oldest ``since``."""
        for entry in self._entries.values():
            return min(entry.since, applied)
        return applied

    def due(self) -> Iterator[ShareKey]:
        """The keys changed ``updates_per_snapshot`` times since their
        ``since``, oldest first (do not apply records while iterating)."""
        return iter(self._due)

    def pinning(self, mark: int) -> Iterator[ShareKey]:
        """The keys whose ``since`` is below ``mark``, oldest first (do not
        apply records while iterating)."""
        return (k for k, _e in takewhile(lambda item: item[1].since < mark,
                                         self._entries.items()))

    def snapshot_value(self, key: ShareKey) -> bytes | None:
        """A ``snapshot`` record of the key's entry as applied (None: it has none)."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        return _dump({"op": "snapshot", "gen": entry.generation, "seq": entry.seq,
                      "owner": entry.owner, "settled": entry.settled,
                      "initial": entry.initial_start,
                      "state": None if entry.machine is None else state_to_json(
                          entry.machine.snapshot())})


def _topic_of(owner: str | None) -> str:
    return "" if owner is None else owner.partition("@")[2]


def _settles(state: ShareState, initial_start: int) -> bool:
    """Whether a record of ``state`` settles its key: the start offset moved,
    or a delivered record is no longer acquired (acknowledged, archived,
    released or timed out)."""
    return state.start_offset != initial_start or any(
        b.delivery_count > 0 and b.state is not RecordState.ACQUIRED for b in state.batches)
