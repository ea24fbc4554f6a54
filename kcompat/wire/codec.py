"""Codec glue over kio: request bodies in, response bodies out.

Theory of operation
-------------------
kio provides one frozen dataclass per (API, version, request/response),
generated from Kafka's JSON schemas, with a native reader and a Python writer.
This module finds the right classes (cached), reads a request body after the
header, and writes a response with its header and size prefix. ``build``
constructs a response entity from keyword arguments, dropping fields that the
chosen version does not have, so handlers can be written once for all versions.
A version kio does not ship (``kio_extra``) is read with a schema declared there
and answered with the older response entity of the same shape.

Finding a class imports its schema module, and its reader and writer are made
on first use: 5-10 ms per (API, version) on a quiet machine, 1.3 s for every
version served, and 60-150 ms steps of the first Fetch or Produce after a
broker restart on a loaded one. ``warm`` does all of it ahead, newest
versions first (what clients ask for), for the broker to run in a worker
thread as it starts.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from functools import cache
from types import ModuleType
from typing import Any

from kio.index import load_payload_module
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from kcompat.wire import kio_extra
from kcompat.wire.headers import response_header
from kcompat.wire.produce_writer import encode_produce_response
from kcompat.wire.versions import API_VERSIONS, PRODUCE

_SIZE = struct.Struct(">i")


class BodyError(ValueError):
    """The request body could not be parsed."""


@cache
def request_module(api_key: int, version: int) -> ModuleType:
    extra = kio_extra.module(api_key, version)  # a schema kio lacks
    return extra or load_payload_module(api_key, version, EntityType.request)


@cache
def response_module(api_key: int, version: int) -> ModuleType:
    version = kio_extra.SAME_RESPONSE_AS.get((api_key, version), version)
    extra = kio_extra.module(api_key, version)
    return extra or load_payload_module(api_key, version, EntityType.response)


def _entity_class(module: ModuleType, kind: object) -> type[Any]:
    for value in vars(module).values():
        if isinstance(value, type) and getattr(value, "__type__", None) is kind:
            return value
    raise LookupError(f"no {kind} entity in {module.__name__}")


@cache
def request_class(api_key: int, version: int) -> type[Any]:
    return _entity_class(request_module(api_key, version), EntityType.request)


@cache
def response_class(api_key: int, version: int) -> type[Any]:
    return _entity_class(response_module(api_key, version), EntityType.response)


@cache
def is_flexible(api_key: int, version: int) -> bool:
    return bool(request_class(api_key, version).__flexible__)


_READERS: dict[type[Any], Callable[[bytes, int], tuple[Any, int]]] = {}
_WRITERS: dict[type[Any], Callable[[io.BytesIO, Any], None]] = {}
_FIELDS: dict[type[Any], frozenset[str]] = {}


def _reader(cls: type[Any]) -> Callable[[bytes, int], tuple[Any, int]]:
    reader = _READERS.get(cls)
    if reader is None:
        reader = _READERS[cls] = entity_reader(cls)
    return reader


def _writer(cls: type[Any]) -> Callable[[io.BytesIO, Any], None]:
    writer = _WRITERS.get(cls)
    if writer is None:
        writer = _WRITERS[cls] = entity_writer(cls)
    return writer


def warm(ranges: dict[int, tuple[int, int]], go_on: Callable[[], bool] | None = None) -> int:
    """Load the request and response classes, readers and writers of every
    version in ``ranges`` (api key -> (min, max)), the newest versions of
    every API first, asking ``go_on`` after each whether to go on (in a worker
    thread it pauses a little, the GIL back to the loop, and says no once the
    broker stops); how many versions it loaded. Safe beside the loop:
    ``cache`` and the dicts may at worst make one twice."""
    versions = sorted(((key, version) for key, (low, high) in ranges.items()
                       for version in range(low, high + 1)),
                      key=lambda kv: (ranges[kv[0]][1] - kv[1], kv[0]))
    done = 0
    for key, version in versions:
        _reader(request_class(key, version))
        _writer(response_class(key, version))
        done += 1
        if go_on is not None and not go_on():
            break
    return done


def read_request(api_key: int, version: int, frame: bytes, offset: int) -> Any:
    cls = request_class(api_key, version)
    try:
        value, _size = _reader(cls)(frame, offset)
    except Exception as e:  # kio raises several types for bad input
        raise BodyError(f"cannot parse {cls.__name__} v{version}: {e}") from e
    return value


def _field_names(cls: type[Any]) -> frozenset[str]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = frozenset(cls.__dataclass_fields__)
    return names


def build(cls: type[Any], **fields: Any) -> Any:
    """Instantiate a kio entity, ignoring fields this version lacks."""
    try:
        return cls(**fields)  # every field is this version's: most builds
    except TypeError:
        pass  # a field this version lacks (or a bad value, which fails again below)
    names = _field_names(cls)
    return cls(**{k: v for k, v in fields.items() if k in names})


def encode_response(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    """Size prefix + response header + body (a Produce answer by
    ``produce_writer`` where it can)."""
    if api_key == PRODUCE:
        fast = encode_produce_response(version, correlation_id, body)
        if fast is not None:
            return fast
    flexible = is_flexible(api_key, version) and api_key != API_VERSIONS
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    buf.write(response_header(correlation_id, flexible))
    _writer(type(body))(buf, body)
    out = buf.getbuffer()
    _SIZE.pack_into(out, 0, len(out) - 4)
    del out
    return buf.getvalue()


def encode_body(value: Any) -> bytes:
    """A kio entity's bytes alone (no size prefix, no header): a request or a
    response as an envelope between brokers carries it."""
    buf = io.BytesIO()
    _writer(type(value))(buf, value)
    return buf.getvalue()


def decode_body(cls: type[Any], data: bytes) -> Any:
    """The entity ``encode_body`` wrote; BodyError when it does not parse."""
    try:
        value, _size = _reader(cls)(data, 0)
    except Exception as e:  # kio raises several types for bad input
        raise BodyError(f"cannot parse {cls.__name__}: {e}") from e
    return value
