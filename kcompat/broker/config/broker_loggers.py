"""BROKER_LOGGER resources (ConfigResource type 8): a broker's log levels.

Theory of operation
-------------------
Kafka lets an admin read and change a running broker's log4j logger levels
through DescribeConfigs and IncrementalAlterConfigs of resource type 8 named
by the broker id (``kafka-configs --entity-type broker-loggers``). The change
is local to that broker and lasts until it restarts: nothing goes through the
controller or the metadata log. kcompat's loggers are Python ``logging``
loggers: ``root`` and every ``kcompat.*`` logger that exists, each listed with
its effective level in log4j's names (WARNING is WARN, CRITICAL is FATAL,
TRACE is below DEBUG) and source DYNAMIC_BROKER_LOGGER_CONFIG. SET takes a
level (upper case, as log4j), DELETE hands the logger back to its parent's
level (not allowed for root). The checks and messages are Kafka 4.4's, in its
order: duplicate keys, nulls, the broker id, then per operation its type, the
logger's existence, the level.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.config.dynamic_config import DELETE, SET, DynamicConfigError

SOURCE_DYNAMIC_BROKER_LOGGER = 6
ROOT = "root"
TRACE = 5
LEVELS = {"TRACE": TRACE, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
          "WARN": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL}
_OP_NAMES = {2: "APPEND", 3: "SUBTRACT"}


def _logger(name: str) -> logging.Logger | None:
    if name == ROOT:
        return logging.getLogger()
    found = logging.Logger.manager.loggerDict.get(name)
    return found if isinstance(found, logging.Logger) else None


def level_name(level: int) -> str:
    """A Python level in log4j's names (the nearest at or above it)."""
    for name, value in sorted(LEVELS.items(), key=lambda item: item[1]):
        if level <= value:
            return name
    return "FATAL"


def names() -> list[str]:
    """The loggers a broker lists: root and kcompat's own."""
    own = [n for n, lg in logging.Logger.manager.loggerDict.items()
           if isinstance(lg, logging.Logger) and (n == "kcompat" or n.startswith("kcompat."))]
    return [ROOT, *sorted(own)]


def describe(asked: Sequence[str] | None) -> list[tuple[str, str]]:
    """(logger, effective level) of every logger, or of those ``asked`` that exist."""
    wanted = [n for n in asked if _logger(n) is not None] if asked else names()
    out = []
    for name in wanted:
        logger = _logger(name)
        assert logger is not None
        out.append((name, level_name(logger.getEffectiveLevel())))
    return out


def _check_node(name: str, node_id: int, not_integer: str, unexpected: str) -> None:
    """``name`` must be this broker's id, else INVALID_REQUEST with Kafka's
    message for the API (``not_integer`` / ``unexpected``, formatted with
    ``name`` and ``node_id``)."""
    try:
        target = int(name)
    except ValueError:
        raise DynamicConfigError(ErrorCode.invalid_request,
                                 not_integer.format(name=name)) from None
    if target != node_id:
        raise DynamicConfigError(ErrorCode.invalid_request,
                                 unexpected.format(name=name, node_id=node_id))


def check_describe_name(name: str, node_id: int) -> None:
    if name == "":
        raise DynamicConfigError(ErrorCode.invalid_request, "Broker id must not be empty")
    _check_node(name, node_id, "Broker id must be an integer, but it is: {name}",
                "Unexpected broker id, expected {node_id} but received {name}")


def _check_alter(name: str, node_id: int, ops: list[tuple[str, int, str | None]]) -> None:
    names_ = [n for n, _, _ in ops]
    if len(set(names_)) != len(names_):
        raise DynamicConfigError(ErrorCode.invalid_request, "Error due to duplicate config keys")
    nulls = [n for n, op, value in ops if value is None and op != DELETE]
    if nulls:
        raise DynamicConfigError(ErrorCode.invalid_request,
                                 f"Null value not supported for : {','.join(nulls)}")
    _check_node(name, node_id, "Node id must be an integer, but it is: {name}",
                "Unexpected node id. Expected {node_id}, but received {name}")
    for logger, op, value in ops:
        if op not in (SET, DELETE):
            what = (f"{_OP_NAMES[op]} operation" if op in _OP_NAMES
                    else f"Unknown operation type {op}")
            raise DynamicConfigError(ErrorCode.invalid_request,
                                     f"{what} is not allowed for the BROKER_LOGGER resource")
        if _logger(logger) is None:
            raise DynamicConfigError(ErrorCode.invalid_config, f"Logger {logger} does not exist!")
        if op == SET and value not in LEVELS:
            raise DynamicConfigError(
                ErrorCode.invalid_config,
                f"Cannot set the log level of {logger} to {value} as it is not a supported log "
                f"level. Valid log levels are {', '.join(sorted(LEVELS))}")
        if op == DELETE and logger == ROOT:
            raise DynamicConfigError(ErrorCode.invalid_request,
                                     "Removing the log level of the root logger is not allowed")


def alter(name: str, node_id: int, ops: list[tuple[str, int, str | None]],
          validate_only: bool) -> None:
    """IncrementalAlterConfigs of BROKER_LOGGER ``name``: checked, then (unless
    ``validate_only``) applied to this process's loggers."""
    _check_alter(name, node_id, ops)
    if validate_only:
        return
    for logger_name, op, value in ops:
        logger: Any = _logger(logger_name)
        logger.setLevel(LEVELS[str(value)] if op == SET else logging.NOTSET)
