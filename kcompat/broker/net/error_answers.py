"""The answer to a request its handler failed on: every error field set.

Theory of operation
-------------------
Kafka answers a request whose handling threw an unexpected exception with
that API's error response (``AbstractRequest.getErrorResponse``):
UNKNOWN_SERVER_ERROR in the response's error codes, the request's own items
(topics, partitions, groups, keys) named back each with that error, and the
connection stays open. Kafka writes one such builder per API; this one is
generic over kio's schemas, for every API and version:

* a response field typed ``ErrorCode`` is ``code``, an ``error_message``
  (or ``*_error_message``) the message;
* a list of entities mirrors a list of the request's at the same place: the
  one whose entities share the most identifying fields (``name``,
  ``topic_id``, ``index``, ``partition_index``, ``group_id``, ...), each item
  answered with those fields copied and the rest blank, recursively (Produce
  answers each topic's each partition; Fetch's partitions are named
  ``partition`` in the request, so it answers with its top-level error and
  no partitions, which its clients read first). A request listing bare
  names (DescribeGroups' groups, FindCoordinator's keys, DeleteTopics'
  ``topic_names`` before v6, OffsetFetch's ``partition_indexes``) is
  mirrored into the response entity's key field; a list one level down
  is flattened (AlterReplicaLogDirs answers the dirs' topics); a list of
  results with no key in common is answered one per item (CreateAcls'
  creations). A list with no counterpart is empty (Metadata's brokers);
* any other field keeps its schema default, or is blank: -1 for offsets,
  epochs, leaders, timestamps and ids (Kafka's "unknown"), 0 for other
  numbers, empty or null strings and bytes, false, no time.

Pure and cached per class: the failure path of ``node.connection`` runs it.
"""

from __future__ import annotations

import dataclasses
import datetime
import typing
import uuid
from types import UnionType
from typing import Any

from kio.schema.errors import ErrorCode

_UNKNOWN = ("offset", "epoch", "leader", "timestamp", "time", "producer_id", "node_id")
_NO_TIME = datetime.datetime.fromtimestamp(0, datetime.UTC)
#: names one item's identity has in requests and responses, under one name each
_ALIASES = {"topic": "name", "topic_name": "name", "user": "name", "partition": "partition_index",
            "partition_id": "partition_index", "index": "partition_index"}
_KEYS = frozenset(("name", "topic_id", "partition_index", "group_id", "key", "transactional_id",
                   "resource_name", "resource_type", "member_id", "mechanism", "path"))
_NAME_KEYS = ("name", "group_id", "key", "transactional_id")  # a bare string's field


def _key(name: str) -> str:
    return _ALIASES.get(name, name)


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str
    hint: Any  # the type, without ``| None``
    nullable: bool
    required: bool
    inner: Any = None  # a tuple's item type


_FIELDS: dict[Any, tuple[_Field, ...]] = {}
_IDENTIFYING: dict[Any, dict[str, str]] = {}


def _fields(cls: Any) -> tuple[_Field, ...]:
    found = _FIELDS.get(cls)
    if found is None:
        found = _FIELDS[cls] = _fields_of(cls)
    return found


def _fields_of(cls: Any) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        hint, nullable = hints[f.name], False
        if isinstance(hint, UnionType) or typing.get_origin(hint) is typing.Union:
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            hint, nullable = args[0], True
        inner = typing.get_args(hint)[0] if typing.get_origin(hint) is tuple else None
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        out.append(_Field(f.name, hint, nullable, required, inner))
    return tuple(out)


def _is_entity(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _identifying(cls: Any) -> dict[str, str]:
    """The fields of an entity that name one of its kind: key -> field name."""
    found = _IDENTIFYING.get(cls)
    if found is None:
        found = _IDENTIFYING[cls] = {
            _key(f.name): f.name for f in _fields(cls)
            if f.inner is None and not _is_entity(f.hint) and _key(f.name) in _KEYS}
    return found


def error_answer(response_cls: type[Any], request: Any, code: ErrorCode,
                 message: str | None) -> Any:
    """``response_cls``'s answer to ``request`` with ``code`` (and ``message``)
    wherever the response has an error field (see the module)."""
    return _entity(response_cls, request, code, message)


def _entity(cls: type[Any], source: Any, code: ErrorCode, message: str | None) -> Any:
    values: dict[str, Any] = {}
    named: dict[str, Any] = {}  # what ``source`` names its item by, per key
    if isinstance(source, dict):
        named = source
    elif source is not None:
        named = {k: getattr(source, name) for k, name in _identifying(type(source)).items()}
    for f in _fields(cls):
        if f.hint is ErrorCode:
            values[f.name] = code
        elif f.name == "error_message" or f.name.endswith("_error_message"):
            values[f.name] = message if f.nullable else (message or "")
        elif f.inner is not None and _is_entity(f.inner):
            values[f.name] = tuple(_entity(f.inner, item, code, message)
                                   for item in _mirrored(f.name, f.inner, source))
        elif f.inner is None and _key(f.name) in named:
            values[f.name] = named[_key(f.name)]
        elif f.required:
            values[f.name] = _blank(f)
    return cls(**values)


def _mirrored(field: str, item_cls: type[Any], source: Any) -> list[Any]:
    """The items of ``source`` (a request entity) that the list ``field`` of
    ``item_cls`` answers: those of its lists whose entities share the most
    keys with ``item_cls``; else its one list of bare names or numbers, as
    the key of ``item_cls``; else, when ``item_cls`` carries an error, its
    list of the same name or its only list, one answer per item (CreateAcls'
    creations, AlterClientQuotas' entries)."""
    if source is None or isinstance(source, dict):
        return []
    wanted = _identifying(item_cls).keys()
    best: list[Any] = []
    best_overlap = 0
    lists: dict[str, tuple[Any, ...]] = {}
    bare_names: list[tuple[Any, ...]] = []
    bare_numbers: list[tuple[Any, ...]] = []
    for f in _fields(type(source)):
        if f.inner is None or getattr(source, f.name) is None:
            continue
        items = getattr(source, f.name)
        if _is_entity(f.inner):
            lists[f.name] = items
            overlap = len(wanted & _identifying(f.inner).keys())
            if overlap > best_overlap:
                best, best_overlap = list(items), overlap
            elif overlap == best_overlap and overlap:
                best.extend(items)  # AlterUserScramCredentials: deletions and upsertions
        elif isinstance(f.inner, type) and issubclass(f.inner, str):
            bare_names.append(items)
        elif isinstance(f.inner, type) and issubclass(f.inner, int):
            bare_numbers.append(items)
    if best_overlap:
        return best
    deeper = [sub for items in lists.values() for item in items
              for sub in _overlapping(wanted, item)]
    if deeper:  # AlterReplicaLogDirs: the dirs' topics, answered by topic
        return deeper
    name_key = next((k for k in _NAME_KEYS if k in wanted), None)
    if name_key is not None and len(bare_names) == 1:
        return [{name_key: name} for name in bare_names[0]]
    if "partition_index" in wanted and len(bare_numbers) == 1:
        return [{"partition_index": number} for number in bare_numbers[0]]
    if any(f.hint is ErrorCode for f in _fields(item_cls)):
        same = lists.get(field)
        if same is None and len(lists) == 1:
            same = next(iter(lists.values()))
        return [{} for _ in same or ()]
    return []


def _overlapping(wanted: Any, source: Any) -> list[Any]:
    """The items of ``source``'s lists whose entities share a key with ``wanted``."""
    return [item for f in _fields(type(source))
            if f.inner is not None and _is_entity(f.inner) and getattr(source, f.name)
            and wanted & _identifying(f.inner).keys()
            for item in getattr(source, f.name)]


def _blank(f: _Field) -> Any:
    hint = f.hint
    if f.nullable:
        return None
    if f.inner is not None:
        return ()
    if _is_entity(hint):
        return _entity(hint, None, ErrorCode.none, None)
    if hint is bool:
        return False
    if issubclass(hint, int):
        return -1 if any(token in f.name for token in _UNKNOWN) else 0
    if issubclass(hint, datetime.timedelta):
        return datetime.timedelta(0)
    if issubclass(hint, datetime.datetime):
        return _NO_TIME
    if issubclass(hint, str):
        return ""
    if issubclass(hint, bytes):
        return b""
    if hint is uuid.UUID:
        return uuid.UUID(int=0)
    raise TypeError(f"no blank value for {f.name}: {hint!r}")
