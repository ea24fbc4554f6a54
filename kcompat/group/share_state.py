"""The share-partition state log (``__share_group_state``), sans-IO.

Theory of operation
-------------------
Kafka keeps each share-partition's durable state with its share coordinator
in ``__share_group_state``; kcompat does the same with one replicated state
machine per partition of that topic (``ShareStateLog``), fed every committed
record by the replication host, so a new leader of a state partition already
holds what it must answer. Records are keyed by (share group, topic,
partition) — a *share key* — and come in three kinds (JSON values):

* ``claim`` with a nonce: the data partition's leader takes the key over
  (after it starts leading the partition, or after a failed write). Applying
  it raises the key's **generation** and names the nonce as its owner; the
  leader reads the state back (``claimed``) once its claim is applied, and
  from then on writes with that generation.
* ``state``: a full snapshot (``full``) or an update (``SharePartition.
  take_update``) written by the owner, with its generation and a sequence
  number (1, 2, ... after each claim). A record of another generation — a
  deposed leader's late write — is ignored, and so is one whose sequence
  number does not follow the last applied one: an update is a delta on top
  of the previous one, so after a lost write (a timeout across a leader
  change) the key keeps the last consistent state, and its owner, told of the
  failure, claims again from there.
* ``delete``: the share group's state for the partition is gone (the group
  or its offsets were deleted); it raises the generation too, fencing the
  leader that held the key (which drops its machine when it applies this
  record as a replica, or claims again after its next failed write).

Every replica folds the records into a ``SharePartition`` per key (its
``restore`` and ``apply``), which is exactly what the owner had when it wrote
them. Junk records (not JSON, unknown kinds) are logged by the host and
skipped: the log is internal, but a bad record must not stop the machine.

Pure and deterministic: no clock, no I/O.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from kcompat.group.share_partition import RecordState, SharePartition, ShareState, StateBatch

SHARE_STATE_TOPIC = "__share_group_state"

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
    return _dump({"op": "claim", "nonce": nonce})


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


def delete_value() -> bytes:
    return _dump({"op": "delete"})


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


def state_to_json(state: ShareState) -> dict[str, Any]:
    return {
        "start": state.start_offset,
        "read": state.read_offset,
        "batches": [[b.first_offset, b.last_offset, int(b.state), b.delivery_count,
                     b.member_id, b.lock_deadline_ms, b.not_before_ms] for b in state.batches],
        "keys": [[offset, base64.b64encode(key).decode()] for offset, key in state.group_keys],
    }


def state_from_json(data: dict[str, Any]) -> ShareState:
    try:
        batches = tuple(StateBatch(int(f), int(last), RecordState(int(s)), int(dc),
                                   member, int(deadline), int(not_before))
                        for f, last, s, dc, member, deadline, not_before in data["batches"])
        keys = tuple((int(offset), base64.b64decode(key)) for offset, key in data["keys"])
        state = ShareState(int(data["start"]), int(data["read"]), batches, keys)
    except (KeyError, ValueError, TypeError) as e:
        raise ShareStateError(f"bad share state: {e}") from e
    if not 0 <= state.start_offset <= state.read_offset or any(
            not b.first_offset <= b.last_offset < state.read_offset for b in batches) or any(
            offset >= state.read_offset for offset, _ in keys):
        raise ShareStateError("bad share state: offsets outside its window")
    return state


def _dump(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


# -- the machine --------------------------------------------------------------------------


@dataclass(slots=True)
class _Entry:
    generation: int = 0
    owner: str | None = None
    machine: SharePartition | None = None
    seq: int = 0  # of the last state record applied in this generation
    initial_start: int = -1  # the start offset of an ``initial`` snapshot
    settled: bool = True  # a record was finished or given back since it


class ShareStateLog:
    """The folded state of one ``__share_group_state`` partition."""

    def __init__(self) -> None:
        self._entries: dict[ShareKey, _Entry] = {}

    def __len__(self) -> int:
        return sum(1 for e in self._entries.values() if e.machine is not None)

    def keys(self) -> list[ShareKey]:
        return sorted(k for k, e in self._entries.items() if e.machine is not None)

    def apply(self, raw_key: bytes | None, raw_value: bytes | None) -> ShareKey:
        """One committed record (its key); ShareStateError for junk (nothing
        changed)."""
        key = decode_key(raw_key)
        try:
            value = json.loads(raw_value or b"")
            op = value["op"]
            if not isinstance(value, dict):
                raise TypeError("not an object")
        except (ValueError, TypeError, KeyError) as e:
            raise ShareStateError(f"bad share-state value for {key}") from e
        entry = self._entries.setdefault(key, _Entry())
        if op == "claim":
            entry.generation += 1
            entry.owner = str(value.get("nonce"))
            entry.seq = 0
        elif op == "state":
            generation = value.get("gen")
            if not isinstance(generation, int):
                raise ShareStateError(f"bad share-state generation {generation!r}")
            seq = value.get("seq")
            if not isinstance(seq, int):
                raise ShareStateError(f"bad share-state sequence number {seq!r}")
            state = state_from_json(value.get("state") or {})
            if generation != entry.generation or seq != entry.seq + 1:
                return key  # a deposed owner's write, or one after a lost write
            entry.seq = seq
            if value.get("full") or entry.machine is None:
                entry.machine = SharePartition.restore(state)
            else:
                entry.machine.apply(state)
            if value.get("initial"):
                entry.initial_start, entry.settled = state.start_offset, False
            elif not entry.settled:
                entry.settled = _settles(state, entry.initial_start)
        elif op == "delete":
            entry.machine = None
            entry.generation += 1
            entry.owner = None
            entry.seq = 0
        else:
            raise ShareStateError(f"unknown share-state record kind {op!r}")
        return key

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

    def settled(self, key: ShareKey) -> bool:
        """False while the key holds only its initial snapshot and
        acquisitions: Kafka reports no start offset for it yet."""
        entry = self._entries.get(key)
        return entry is None or entry.settled

    def state(self, key: ShareKey) -> ShareState | None:
        entry = self._entries.get(key)
        return None if entry is None or entry.machine is None else entry.machine.snapshot()

    def machine(self, key: ShareKey) -> SharePartition | None:
        """The folded machine (read only: for describe and offsets)."""
        entry = self._entries.get(key)
        return None if entry is None else entry.machine


def _settles(state: ShareState, initial_start: int) -> bool:
    """Whether a record of ``state`` settles its key: the start offset moved,
    or a delivered record is no longer acquired (acknowledged, archived,
    released or timed out)."""
    return state.start_offset != initial_start or any(
        b.delivery_count > 0 and b.state is not RecordState.ACQUIRED for b in state.batches)
