"""SCRAM credentials (KIP-554): what AlterUserScramCredentials stores and
DescribeUserScramCredentials and the SASL/SCRAM login find.

Theory of operation
-------------------
A credential is one user's under one mechanism (SCRAM-SHA-256 or -512):
salt, stored key, server key and iterations (``kcompat.security.scram``) —
never the salted password the client sends, which the broker that receives
the request turns into the two keys at once. Credentials live in the
replicated metadata log, like client quotas: one ``scram_credentials``
record per request, ``{"ops": [[user, mechanism, credential or null], ...]}``
(null deletes; ``ScramCredential.to_json``): a request's changes commit
together, as Kafka's controller commits them (``ControllerResult.atomicOf``).
Every broker applies the record (``MetadataImage.apply``) to
``MetadataImage.scram_credentials`` (mechanism -> user -> credential) in log
order; the image is the same everywhere, survives restarts and is part of
the metadata checkpoint. The controller checks deletions again against its
own image (``missing_deletions``).

``plan`` is Kafka 4.4's ``ScramControlManager.alterCredentials``: deletions
first, then upsertions, each user at most once per request (a second
alteration of a user is DUPLICATE_RESOURCE and cancels the first; a user
with an error is not looked at again), an empty user UNACCEPTABLE_CREDENTIAL,
an unknown mechanism UNSUPPORTED_SASL_MECHANISM, iterations outside
4096..16384 UNACCEPTABLE_CREDENTIAL, deleting what does not exist
RESOURCE_NOT_FOUND, an empty salted password (an empty HMAC key)
UNKNOWN_SERVER_ERROR. Its answer lists the deletions done, the upsertions
done, then the errors, each group in the iteration order of the Java
``HashMap`` Kafka keeps it in (``JavaHashOrder``); ``describe`` is
``ScramImage.describe``, in that order too.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.security import scram
from kcompat.security.scram import ScramCredential

#: Kafka's ``ScramControlManager.MAX_ITERATIONS``
MAX_ITERATIONS = 16384

DUPLICATE_ALTERATION = "A user credential cannot be altered twice in the same request"
DELETE_MISSING = "Attempt to delete a user credential that does not exist"
DESCRIBE_DUPLICATE = "Cannot describe SCRAM credentials for the same user twice in a single " \
                     "request: "
DESCRIBE_MISSING = "Attempt to describe a user credential that does not exist: "

Credentials = Mapping[str, Mapping[str, ScramCredential]]  # mechanism -> user -> credential
Error = tuple[ErrorCode, str | None]
#: one change: (user, mechanism, the new credential or None to delete)
Op = tuple[str, str, ScramCredential | None]


class JavaHashOrder:
    """The iteration order of a ``java.util.HashMap<String, ?>`` after the same
    puts and removes: buckets by ``String.hashCode`` spread over the table
    (16 slots, doubled whenever more than 3/4 full; it never shrinks), and
    insertion order within a bucket. Bins of 8 colliding keys are not modelled."""

    def __init__(self) -> None:
        self._seq: dict[str, int] = {}
        self._next = 0
        self._capacity = 16

    def put(self, key: str) -> None:
        if key not in self._seq:
            self._seq[key] = self._next
            self._next += 1
            while len(self._seq) > self._capacity * 3 // 4:
                self._capacity *= 2

    def remove(self, key: str) -> bool:
        return self._seq.pop(key, None) is not None

    def __contains__(self, key: str) -> bool:
        return key in self._seq

    def keys(self) -> list[str]:
        return sorted(self._seq, key=lambda k: (_spread(k) & (self._capacity - 1),
                                                self._seq[k]))


def _spread(key: str) -> int:
    h = 0
    data = key.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h ^ (h >> 16)


@dataclass(frozen=True, slots=True)
class Upsertion:
    user: str
    mechanism_type: int
    iterations: int
    salt: bytes
    salted_password: bytes


def _check_user_and_mechanism(user: str, mechanism_type: int) -> Error | None:
    if not user:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if scram.mechanism_of_type(mechanism_type) is None:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    return None


def _check_upsertion(up: Upsertion) -> Error | None:
    found = _check_user_and_mechanism(up.user, up.mechanism_type)
    if found is not None:
        return found
    if up.iterations < scram.MIN_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too few iterations"
    if up.iterations > MAX_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too many iterations"
    return None


def plan(deletions: Sequence[tuple[str, int]], upsertions: Sequence[Upsertion],
         exists: Callable[[str, str], bool]) -> tuple[list[tuple[str, Error]], list[Op]]:
    """Kafka's answer to an AlterUserScramCredentials request — (user, (code,
    message)) in its order — and the changes to commit. ``exists(user,
    mechanism)``: the credential is there to delete."""
    errors: dict[str, Error] = {}
    error_order, delete_order, upsert_order = JavaHashOrder(), JavaHashOrder(), JavaHashOrder()
    to_delete: dict[str, str] = {}
    to_upsert: dict[str, Upsertion] = {}

    def fail(user: str, error: Error) -> None:
        errors[user] = error
        error_order.put(user)

    for user, mechanism_type in deletions:
        if user in errors:
            continue
        if delete_order.remove(user):
            fail(user, (ErrorCode.duplicate_resource, DUPLICATE_ALTERATION))
            continue
        found = _check_user_and_mechanism(user, mechanism_type)
        mechanism = scram.mechanism_of_type(mechanism_type)
        if found is None and mechanism is not None and not exists(user, mechanism):
            found = ErrorCode.resource_not_found, DELETE_MISSING
        if found is not None:
            fail(user, found)
        elif mechanism is not None:
            to_delete[user] = mechanism
            delete_order.put(user)
    for up in upsertions:
        if up.user in errors:
            continue
        if delete_order.remove(up.user) | upsert_order.remove(up.user):
            fail(up.user, (ErrorCode.duplicate_resource, DUPLICATE_ALTERATION))
            continue
        found = _check_upsertion(up)
        if found is not None:
            fail(up.user, found)
        else:
            to_upsert[up.user] = up
            upsert_order.put(up.user)
    ops: list[Op] = [(user, to_delete[user], None) for user in delete_order.keys()]
    done = [(user, (ErrorCode.none, None)) for user in delete_order.keys()]
    for user in upsert_order.keys():
        up = to_upsert[user]
        mechanism = scram.mechanism_of_type(up.mechanism_type)
        assert mechanism is not None
        try:
            credential = scram.credential_from_salted(mechanism, up.salt, up.salted_password,
                                                      up.iterations)
        except ValueError:  # Kafka answers it without a message
            fail(user, (ErrorCode.unknown_server_error, None))
            continue
        ops.append((user, mechanism, credential))
        done.append((user, (ErrorCode.none, None)))
    return done + [(user, errors[user]) for user in error_order.keys()], ops


# -- the metadata record -----------------------------------------------------------------


def encode_ops(ops: Iterable[Op]) -> list[list[Any]]:
    """Ops as JSON (the forwarded change and the record carry them so)."""
    return [[user, mechanism, None if cred is None else cred.to_json()]
            for user, mechanism, cred in ops]


def decode_ops(raw: Iterable[Sequence[Any]]) -> list[Op]:
    return [(str(user), str(mechanism), None if cred is None else ScramCredential.from_json(cred))
            for user, mechanism, cred in raw]


def record(ops: Iterable[Op]) -> dict[str, Any]:
    """The metadata record carrying out ``ops`` (``MetadataImage.apply`` on every broker)."""
    return {"type": "scram_credentials", "ops": encode_ops(ops)}


def checkpoint(credentials: Credentials) -> list[list[Any]]:
    """The credentials as a metadata checkpoint holds them."""
    return [[mechanism, user, cred.to_json()]
            for mechanism, users in credentials.items() for user, cred in users.items()]


def from_checkpoint(entries: Iterable[Sequence[Any]]) -> dict[str, dict[str, ScramCredential]]:
    out: dict[str, dict[str, ScramCredential]] = {}
    for mechanism, user, doc in entries:
        out.setdefault(str(mechanism), {})[str(user)] = ScramCredential.from_json(doc)
    return out


def missing_deletions(credentials: Credentials, ops: Iterable[Op]) -> list[str]:
    """Users whose credential an op deletes and the image no longer has (the
    controller checks again what the receiving broker checked)."""
    return [user for user, mechanism, cred in ops
            if cred is None and user not in credentials.get(mechanism, {})]


# -- DescribeUserScramCredentials ----------------------------------------------------------


def describe(credentials: Credentials, users: Sequence[str] | None
             ) -> list[tuple[str, Error, list[tuple[int, int]]]]:
    """Kafka's ``ScramImage.describe``: every user with a credential when no user
    is named (null or empty), else each named one — (user, (code, message),
    [(mechanism type, iterations)]), users in Kafka's hash order, mechanisms by
    type; a user found has the empty message, as in Kafka's answer."""
    order, twice = JavaHashOrder(), set()
    if not users:
        for by_user in credentials.values():
            for user in by_user:
                order.put(user)
    for user in users or ():
        if user in order:
            twice.add(user)
        order.put(user)
    out: list[tuple[str, Error, list[tuple[int, int]]]] = []
    for user in order.keys():
        if user in twice:
            out.append((user, (ErrorCode.duplicate_resource, DESCRIBE_DUPLICATE + user), []))
            continue
        infos = sorted((scram.MECHANISM_TYPES[m], by_user[user].iterations)
                       for m, by_user in credentials.items() if user in by_user)
        if infos:
            out.append((user, (ErrorCode.none, ""), infos))
        else:
            out.append((user, (ErrorCode.resource_not_found, DESCRIBE_MISSING + user), []))
    return out
