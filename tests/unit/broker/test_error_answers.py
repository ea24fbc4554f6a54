"""The answer to a request whose handler failed (``broker.net.error_answers``): for
every API and version served, a response that encodes, with
UNKNOWN_SERVER_ERROR in every error field and the request's items named
back; read with kafka-python's own codec (not kio) where it has the version."""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from typing import Any

import pytest
from kafka.protocol.admin.groups import DescribeGroupsResponse
from kafka.protocol.consumer.group import OffsetCommitResponse
from kafka.protocol.consumer.offsets import ListOffsetsResponse
from kafka.protocol.metadata.find_coordinator import FindCoordinatorResponse
from kafka.protocol.metadata.metadata import MetadataResponse
from kafka.protocol.producer.produce import ProduceResponse
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from kcompat.broker.net.error_answers import _fields, _is_entity, error_answer
from kcompat.wire import codec
from kcompat.wire import versions as v
from kcompat.wire.versions import served

E = ErrorCode.unknown_server_error


def _sample(cls: type[Any], depth: int = 0) -> Any:
    """A request entity with every list holding two items (names "a", "b",
    numbers 1, 2 where they identify)."""
    values: dict[str, Any] = {}
    for f in _fields(cls):
        if f.inner is not None:
            if _is_entity(f.inner):
                values[f.name] = tuple(_with(_sample(f.inner, depth + 1), n)
                                       for n in (1, 2)) if depth < 4 else ()
            elif isinstance(f.inner, type) and issubclass(f.inner, str):
                values[f.name] = ("a", "b")
            elif isinstance(f.inner, type) and issubclass(f.inner, int):
                values[f.name] = (1, 2)
            else:
                values[f.name] = ()
        elif _is_entity(f.hint):
            values[f.name] = _sample(f.hint, depth + 1)
        elif f.hint is ErrorCode:
            values[f.name] = ErrorCode.none
        elif f.hint is bool:
            values[f.name] = False
        elif isinstance(f.hint, type) and issubclass(f.hint, int | float):
            values[f.name] = 0
        elif f.hint is uuid.UUID:
            values[f.name] = uuid.UUID(int=5)
        elif isinstance(f.hint, type) and issubclass(f.hint, datetime.timedelta):
            values[f.name] = datetime.timedelta(0)
        elif isinstance(f.hint, type) and issubclass(f.hint, str):
            values[f.name] = "x"
        elif f.nullable:
            values[f.name] = None
        elif isinstance(f.hint, type) and issubclass(f.hint, bytes):
            values[f.name] = b""
    return cls(**values)


def _with(item: Any, n: int) -> Any:
    """``item`` told apart from its sibling: its name and index fields."""
    changes: dict[str, Any] = {}
    for f in _fields(type(item)):
        if f.name in ("name", "topic", "group_id", "key"):
            changes[f.name] = "abc"[n]
        elif f.name in ("index", "partition_index", "partition"):
            changes[f.name] = n
    return dataclasses.replace(item, **changes)


def _error_codes(entity: Any) -> list[ErrorCode]:
    found = []
    for f in _fields(type(entity)):
        value = getattr(entity, f.name)
        if f.hint is ErrorCode:
            found.append(value)
        elif f.inner is not None and _is_entity(f.inner) and value is not None:
            for item in value:
                found.extend(_error_codes(item))
        elif _is_entity(f.hint) and value is not None:
            found.extend(_error_codes(value))
    return found


def _all_versions() -> list[tuple[int, int]]:
    return [(key, version) for key, rng in sorted(served(False).items())
            for version in range(rng.parse_min, rng.max_version + 1)]


@pytest.mark.parametrize(("key", "version"), _all_versions(),
                         ids=[f"{v.api_name(k)}-v{n}" for k, n in _all_versions()])
def test_every_api_version_has_an_error_answer_that_encodes(key: int, version: int) -> None:
    request = _sample(codec.request_class(key, version))
    answer = error_answer(codec.response_class(key, version), request, E, "boom")
    raw = codec.encode_response(key, version, 7, answer)
    header = 9 if codec.is_flexible(key, version) and key != v.API_VERSIONS else 8
    decoded, _ = entity_reader(type(answer))(raw, header)
    assert decoded == answer
    codes = _error_codes(answer)
    assert codes and all(code == E for code in codes), codes


def _kafka_python(response_cls: Any, key: int, version: int, request: Any) -> Any:
    answer = error_answer(codec.response_class(key, version), request, E, "boom")
    raw = codec.encode_response(key, version, 7, answer)
    return response_cls[version].decode(raw[4:], header=True)


def test_produce_names_every_partition_with_the_error() -> None:
    request = _sample(codec.request_class(v.PRODUCE, 8))
    answer = _kafka_python(ProduceResponse, v.PRODUCE, 8, request)
    topics = [(t.name, [(p.index, p.error_code, p.base_offset) for p in t.partition_responses])
              for t in answer.responses]
    assert topics == [("b", [(1, -1, -1), (2, -1, -1)]), ("c", [(1, -1, -1), (2, -1, -1)])]


def test_list_offsets_and_offset_commit_name_their_partitions() -> None:
    listed = _kafka_python(ListOffsetsResponse, v.LIST_OFFSETS, 4,
                           _sample(codec.request_class(v.LIST_OFFSETS, 4)))
    assert [(t.name, [(p.partition_index, p.error_code, p.offset) for p in t.partitions])
            for t in listed.topics] == [("b", [(1, -1, -1), (2, -1, -1)]),
                                        ("c", [(1, -1, -1), (2, -1, -1)])]
    committed = _kafka_python(OffsetCommitResponse, v.OFFSET_COMMIT, 6,
                              _sample(codec.request_class(v.OFFSET_COMMIT, 6)))
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions])
            for t in committed.topics] == [("b", [(1, -1), (2, -1)]), ("c", [(1, -1), (2, -1)])]


def test_bare_names_answer_in_the_key_field() -> None:
    groups = _kafka_python(DescribeGroupsResponse, v.DESCRIBE_GROUPS, 3,
                           _sample(codec.request_class(v.DESCRIBE_GROUPS, 3)))
    assert [(g.error_code, g.group_id) for g in groups.groups] == [(-1, "a"), (-1, "b")]
    found = _kafka_python(FindCoordinatorResponse, v.FIND_COORDINATOR, 2,
                          _sample(codec.request_class(v.FIND_COORDINATOR, 2)))
    assert (found.error_code, found.node_id) == (-1, -1)


def test_metadata_names_the_topics_asked_for_and_no_broker() -> None:
    answer = _kafka_python(MetadataResponse, v.METADATA, 8,
                           _sample(codec.request_class(v.METADATA, 8)))
    assert list(answer.brokers) == []
    assert [(t.error_code, t.name, list(t.partitions)) for t in answer.topics] == [
        (-1, "b", []), (-1, "c", [])]
