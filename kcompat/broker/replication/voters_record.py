"""KRaft's voter-set control batch (KIP-853 ``VotersRecord``, control type 6).

Theory of operation
-------------------
A Raft configuration entry (``Entry.voters``) is stored as what KRaft writes
for one: a control batch (``isControl``; clients skip it like a transaction
marker) of one record whose key is the control key v0 (int16 version 0,
int16 type 6 = ``KRAFT_VOTERS``) and whose value is a ``VotersRecord`` v0, a
flexible message: int16 Version, then the voters as a compact array, each an
int32 VoterId, a 16-byte VoterUuid (the directory id; all zeros here, kcompat
has no directory ids), a compact array of Endpoints (name, host, uint16 port
— empty here: brokers reach each other through the metadata image), a
KRaftVersionFeature (int16 min and max supported kraft.version, 0..1) and
empty tagged fields at every level. Decoding reads exactly that layout and
skips tagged fields, so a record written by Kafka reads too.

``control_type`` peeks at the control key of a control batch's first record
without decoding the batch: the read path decodes nothing else unless it is
a type-6 batch. Pure: no I/O.
"""

from __future__ import annotations

import struct

from kcompat.wire.batch import HEADER_SIZE, BatchError, parse_header
from kcompat.wire.headers import read_uvarint, skip_tagged_fields  # HeaderError: a ValueError
from kcompat.wire.records import decode_batch, decode_varint, encode_batch

CONTROL_KRAFT_VOTERS = 6
VOTERS_RECORD_VERSION = 0
KRAFT_VERSION_RANGE = (0, 1)  # kraft.version levels a voter supports (KIP-853)

_I16 = struct.Struct(">h")
_VOTER = struct.Struct(">i16s")
_FEATURE = struct.Struct(">hh")
_CONTROL_KEY = struct.Struct(">hh")


def _uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def encode_voters(voters: frozenset[int]) -> bytes:
    """The ``VotersRecord`` v0 value for ``voters`` (ids ascending)."""
    out = bytearray(_I16.pack(VOTERS_RECORD_VERSION))
    _uvarint(out, len(voters) + 1)
    for voter in sorted(voters):
        out += _VOTER.pack(voter, bytes(16))
        _uvarint(out, 1)  # Endpoints: empty compact array
        out += _FEATURE.pack(*KRAFT_VERSION_RANGE)
        _uvarint(out, 0)  # KRaftVersionFeature's tagged fields
        _uvarint(out, 0)  # Voter's tagged fields
    _uvarint(out, 0)  # the record's tagged fields
    return bytes(out)


def decode_voters(value: bytes) -> frozenset[int]:
    """The voter ids of a ``VotersRecord`` value; raises ValueError if malformed."""
    try:
        (version,) = _I16.unpack_from(value, 0)
        if version != VOTERS_RECORD_VERSION:
            raise ValueError(f"VotersRecord version {version} is not supported")
        count, pos = read_uvarint(value, 2)
        if count == 0:
            raise ValueError("VotersRecord with a null voter array")
        voters = []
        for _ in range(count - 1):
            voter, _uuid = _VOTER.unpack_from(value, pos)
            pos += _VOTER.size
            endpoints, pos = read_uvarint(value, pos)
            for _ in range(max(endpoints - 1, 0)):
                for _string in range(2):  # Name, Host
                    size, pos = read_uvarint(value, pos)
                    pos += max(size - 1, 0)
                pos += 2  # Port
                pos = skip_tagged_fields(value, pos)
            pos += _FEATURE.size
            pos = skip_tagged_fields(value, pos)  # KRaftVersionFeature
            pos = skip_tagged_fields(value, pos)  # Voter
            voters.append(voter)
        skip_tagged_fields(value, pos)
    except struct.error as e:
        raise ValueError(f"truncated VotersRecord: {e}") from None
    if not voters:
        raise ValueError("VotersRecord without voters")
    return frozenset(voters)


def voters_batch(voters: frozenset[int], now_ms: int) -> bytes:
    """A control batch with one KRaftVoters record for ``voters``."""
    key = _CONTROL_KEY.pack(0, CONTROL_KRAFT_VOTERS)
    return encode_batch([(key, encode_voters(voters), (), now_ms)], control=True)


def control_type(batch: bytes | memoryview) -> int:
    """The control type of a control batch's first record (its key, read in
    place unless the batch is compressed — Kafka never compresses control
    batches), or -1 when it has none or cannot be read."""
    try:
        if parse_header(batch).compression:
            records = decode_batch(batch)
            key = records[0].key if records else None
            if key is None or len(key) < _CONTROL_KEY.size:
                return -1
            return int(_CONTROL_KEY.unpack_from(key)[1])
        pos = HEADER_SIZE
        _length, pos = decode_varint(batch, pos)
        pos += 1  # attributes
        _ts, pos = decode_varint(batch, pos, 10)
        _delta, pos = decode_varint(batch, pos)
        key_size, pos = decode_varint(batch, pos)
        if key_size < _CONTROL_KEY.size or pos + key_size > len(batch):
            return -1
        return int(_CONTROL_KEY.unpack_from(batch, pos)[1])
    except (BatchError, struct.error):
        return -1


def batch_voters(batch: bytes | memoryview) -> frozenset[int] | None:
    """The voter set of a KRaftVoters control batch, None for any other batch
    (call only for control batches: the hot path checks the flag first)."""
    if control_type(batch) != CONTROL_KRAFT_VOTERS:
        return None
    try:
        records = decode_batch(batch)
        if len(records) != 1 or records[0].value is None:
            return None
        return decode_voters(records[0].value)
    except ValueError:  # BatchError too: a batch this module cannot read
        return None
