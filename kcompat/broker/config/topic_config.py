"""Per-topic configs: the keys Kafka 4.x topics have, with broker-level defaults.

Theory of operation
-------------------
A topic stores only the keys set on it (``overrides``); every other key takes
its value from the broker key named in its definition (``log.retention.ms`` for
``retention.ms``...), or the static default. DescribeConfigs reports each key
with its source (topic, broker default, static default). ``log_config`` turns
the effective values into the storage layer's ``LogConfig``; its segment size is
Kafka's internal ``internal.segment.bytes`` where set (tests use it for small
segments, since ``segment.bytes`` is at least 1 MiB), else ``segment.bytes``.
"""

from __future__ import annotations

from typing import Any

from kcompat.broker.config.configdef import LONG_MAX, ConfigDef, ConfigError
from kcompat.ext import dedup, retry, view_filter
from kcompat.ext.delay import DELAY_MAX_MS_DEFAULT
from kcompat.ext.retry import RetryPolicy
from kcompat.log.config import LogConfig

SEGMENT_BYTES_MIN = 1 << 20
INTERNAL_SEGMENT_BYTES = "internal.segment.bytes"


def _filter_problem(text: str) -> str | None:
    """A ``kc.view.filter`` that does not compile: the message with its position."""
    if not text.strip():
        return "must not be empty"
    try:
        view_filter.parse(text)
    except view_filter.FilterError as e:
        return f"{text!r}: {e.message} at position {e.position}"
    return None


def _level(low: int, high: int, default_ok: int | None = None) -> Any:
    def check(value: int) -> str | None:
        if low <= value <= high or value == default_ok:
            return None
        extra = f" or {default_ok}" if default_ok is not None else ""
        return f"{value} is not in [{low},...,{high}]{extra}"
    return check


def _throttled(value: list[str]) -> str | None:
    """[PartitionId]:[BrokerId] entries, or the wildcard '*' (Kafka's validator)."""
    if value == ["*"]:
        return None
    for entry in value:
        parts = entry.split(":")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
            return (f"{','.join(value)!r} must be the literal '*' or a list of replicas in the "
                    "following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")
    return None


def _no_tiered_storage(value: bool) -> str | None:
    return ("Tiered Storage functionality is disabled in the broker. Topic cannot be "
            "configured with remote log storage.") if value else None


_D = ConfigDef
TOPIC_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        _D("cleanup.policy", "list", ["delete"], choices=("delete", "compact"),
           broker_key="log.cleanup.policy"),
        _D("compression.type", "string", "producer",
           choices=("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
           broker_key="compression.type"),
        _D("compression.gzip.level", "int", -1, check=_level(1, 9, -1),
           broker_key="compression.gzip.level"),
        _D("compression.lz4.level", "int", 9, check=_level(1, 17),
           broker_key="compression.lz4.level"),
        _D("compression.zstd.level", "int", 3, check=_level(-131072, 22),
           broker_key="compression.zstd.level"),
        _D("delete.retention.ms", "long", 86400000, minimum=0,
           broker_key="log.cleaner.delete.retention.ms"),
        _D("file.delete.delay.ms", "long", 60000, minimum=0),
        _D("flush.messages", "long", LONG_MAX, minimum=1),
        _D("follower.replication.throttled.replicas", "list", [], check=_throttled),
        _D("flush.ms", "long", LONG_MAX, minimum=0),
        _D("index.interval.bytes", "int", 4096, minimum=0,
           broker_key="log.index.interval.bytes"),
        _D("leader.replication.throttled.replicas", "list", [], check=_throttled),
        _D("local.retention.bytes", "long", -2, minimum=-2, broker_key="log.local.retention.bytes"),
        _D("local.retention.ms", "long", -2, minimum=-2, broker_key="log.local.retention.ms"),
        _D("max.compaction.lag.ms", "long", LONG_MAX, minimum=1,
           broker_key="log.cleaner.max.compaction.lag.ms"),
        _D("max.decompressed.message.bytes", "int", 2147483639, minimum=1,
           broker_key="max.decompressed.message.bytes"),
        _D("max.message.bytes", "int", 1048588, minimum=0, broker_key="message.max.bytes"),
        _D("message.timestamp.type", "string", "CreateTime",
           choices=("CreateTime", "LogAppendTime"), broker_key="log.message.timestamp.type"),
        _D("message.timestamp.before.max.ms", "long", LONG_MAX, minimum=0),
        _D("message.timestamp.after.max.ms", "long", 3600000, minimum=0),
        _D("min.cleanable.dirty.ratio", "double", 0.5, minimum=0, maximum=1,
           broker_key="log.cleaner.min.cleanable.ratio"),
        _D("min.compaction.lag.ms", "long", 0, minimum=0,
           broker_key="log.cleaner.min.compaction.lag.ms"),
        _D("min.insync.replicas", "int", 1, minimum=1, broker_key="min.insync.replicas"),
        _D("preallocate", "boolean", False),
        _D("remote.copy.lag.bytes", "long", -1, minimum=-1,
           broker_key="log.remote.copy.lag.bytes"),
        _D("remote.copy.lag.ms", "long", 0, broker_key="log.remote.copy.lag.ms"),
        _D("remote.log.copy.disable", "boolean", False),
        _D("remote.log.delete.on.disable", "boolean", False),
        _D("remote.storage.enable", "boolean", False, check=_no_tiered_storage),
        _D("retention.bytes", "long", -1, broker_key="log.retention.bytes"),
        _D("retention.ms", "long", 604800000, minimum=-1, broker_key="log.retention.ms"),
        # KIP-1191: may share groups dead-letter into this topic
        _D("errors.deadletterqueue.group.enable", "boolean", False),
        # Kafka 4 (KAFKA-16368): at least 1 MiB; smaller segments only through
        # the internal key below, meant for tests
        _D("segment.bytes", "int", 1073741824, minimum=SEGMENT_BYTES_MIN,
           broker_key="log.segment.bytes", kafka_text=True),
        _D("segment.index.bytes", "int", 10485760, minimum=4),
        _D("segment.jitter.ms", "long", 0, minimum=0),
        _D("segment.ms", "long", 604800000, minimum=1, broker_key="log.roll.ms"),
        _D("unclean.leader.election.enable", "boolean", False),
        # Kafka's internal key: when set, the segment size instead of
        # segment.bytes, with no lower bound; listed only where set
        _D(INTERNAL_SEGMENT_BYTES, "int", None, internal=True, kafka_text=True),
        # extensions (docs/extensions.md): listed only where set, so plain topics
        # describe exactly as in Kafka
        _D("kc.delay.max.ms", "long", DELAY_MAX_MS_DEFAULT, minimum=0),
        _D("kc.retry.of", "string", ""),  # set: a retry topic of that topic
        _D("kc.retry.max.attempts", "int", retry.MAX_ATTEMPTS, minimum=0),
        _D("kc.retry.backoff.ms", "long", retry.BACKOFF_MS, minimum=0),
        _D("kc.retry.backoff.multiplier", "double", retry.MULTIPLIER, minimum=1.0),
        _D("kc.retry.backoff.max.ms", "long", retry.BACKOFF_MAX_MS, minimum=0),
        _D("kc.dlq.topic", "string", ""),  # empty: <topic>.dlq
        _D("kc.dedup.window.ms", "long", 0, minimum=0),  # 0: off
        _D("kc.dedup.by", "string", dedup.BY_HEADER, choices=dedup.DEDUP_BY),
        _D("kc.dedup.max.entries", "long", dedup.MAX_ENTRIES_DEFAULT, minimum=1),
        _D("kc.view.of", "string", ""),  # set: a filtered view of that topic
        _D("kc.view.filter", "string", "", check=_filter_problem),
    )
}
# what a retry topic auto-created for a topic inherits from it
RETRY_KEYS = ("kc.retry.max.attempts", "kc.retry.backoff.ms", "kc.retry.backoff.multiplier",
              "kc.retry.backoff.max.ms", "kc.dlq.topic")
EXTENSION_PREFIX = "kc."
VIEW_OF, VIEW_FILTER = "kc.view.of", "kc.view.filter"
VIEW_KEYS = (VIEW_OF, VIEW_FILTER)


def view_source(overrides: dict[str, Any]) -> str | None:
    """The source topic of a view (``kc.view.of``), else None."""
    return overrides.get(VIEW_OF) or None


def listed_keys(overrides: dict[str, Any]) -> list[str]:
    """The keys DescribeConfigs / CreateTopics list for a topic: Kafka's, and
    an internal or extension key only where the topic sets it."""
    return [k for k, d in TOPIC_CONFIGS.items()
            if k in overrides or not (d.internal or k.startswith(EXTENSION_PREFIX))]


def segment_bytes(overrides: dict[str, Any], broker: dict[str, Any]) -> int:
    """The segment size (Kafka's ``LogConfig.segmentSize``): ``internal.segment.bytes``
    where the topic sets it (any int, as in Kafka), else ``segment.bytes``."""
    internal = overrides.get(INTERNAL_SEGMENT_BYTES)
    if internal is not None:
        return int(internal)
    return int(effective("segment.bytes", overrides, broker)[0])


def retry_policy(overrides: dict[str, Any], broker: dict[str, Any]) -> RetryPolicy | None:
    """The retry policy of a retry topic (``kc.retry.of`` set), else None."""
    of = overrides.get("kc.retry.of")
    if not of:
        return None

    def get(key: str) -> Any:
        return effective(key, overrides, broker)[0]

    return RetryPolicy(str(of), int(get("kc.retry.max.attempts")),
                       int(get("kc.retry.backoff.ms")),
                       float(get("kc.retry.backoff.multiplier")),
                       int(get("kc.retry.backoff.max.ms")), str(get("kc.dlq.topic")))


def validate_overrides(raw: dict[str, Any]) -> dict[str, Any]:
    """Parse a dict of user-supplied topic configs; raises ConfigError."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        definition = TOPIC_CONFIGS.get(key)
        if definition is None:
            raise ConfigError(key, "unknown topic config")
        out[key] = definition.parse(value)
    return out


def effective(key: str, overrides: dict[str, Any], broker: dict[str, Any]) -> tuple[Any, str]:
    """(value, source) where source is 'topic', 'broker' or 'default'."""
    if key in overrides:
        return overrides[key], "topic"
    definition = TOPIC_CONFIGS[key]
    if definition.broker_key and definition.broker_key in broker:
        return broker[definition.broker_key], "broker"
    return definition.default, "default"


def log_config(overrides: dict[str, Any], broker: dict[str, Any]) -> LogConfig:
    def get(key: str) -> Any:
        return effective(key, overrides, broker)[0]

    return LogConfig(
        segment_bytes=max(1, segment_bytes(overrides, broker)),  # < 1: a batch a segment
        segment_ms=int(get("segment.ms")),
        retention_ms=int(get("retention.ms")),
        retention_bytes=int(get("retention.bytes")),
        index_interval_bytes=int(get("index.interval.bytes")),
        delete="delete" in get("cleanup.policy"),
        compact="compact" in get("cleanup.policy"),
        min_cleanable_dirty_ratio=float(get("min.cleanable.dirty.ratio")),
        min_compaction_lag_ms=int(get("min.compaction.lag.ms")),
        max_compaction_lag_ms=int(get("max.compaction.lag.ms")),
        delete_retention_ms=int(get("delete.retention.ms")),
    )
