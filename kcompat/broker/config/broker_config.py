"""Broker configuration: embedded defaults < YAML file < flags < KCOMPAT_* env.

Theory of operation
-------------------
Keys are Kafka's own names wherever Kafka has one (``num.partitions``,
``log.retention.ms``...); kcompat-only keys start with ``kcompat.``. Every layer
is validated through the same ``ConfigDef``s, so a bad value anywhere fails with
one line naming the key. An environment variable maps to a key by lower-casing
and turning ``_`` into ``.`` after the ``KCOMPAT_`` prefix
(``KCOMPAT_NUM_PARTITIONS=3`` -> ``num.partitions``); ``KCOMPAT_LOG_LEVEL``,
``KCOMPAT_LOG_FORMAT`` and ``KCOMPAT_LOOP_REPORT_EVERY_S`` (``loop_monitor``) set
up logging and are not config keys.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcompat.broker.config.configdef import ConfigDef, ConfigError
from kcompat.security import properties
from kcompat.security.acl import STANDARD_AUTHORIZER


def _host_counts(value: str) -> str | None:
    """``max.connections.per.ip.overrides``: ``host:count`` pairs, comma-separated."""
    for item in (p.strip() for p in value.split(",")):
        host, sep, count = item.rpartition(":")
        if item and not (sep and host and count.strip().isdigit()):
            return f"{item!r} is not host:count"
    return None


QUORUM_BOOTSTRAP_SERVERS = "controller.quorum.bootstrap.servers"


_HOST = re.compile(r"[0-9A-Za-z._-]+|\[[0-9A-Fa-f:.%A-Za-z]+\]")


def parse_host_port(entry: str) -> tuple[str, int] | None:
    """``host:port`` (``[v6]:port`` too) -> (host, port); None if it is not one."""
    host, sep, port = entry.strip().rpartition(":")
    if not sep or not _HOST.fullmatch(host) or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port)


def _bootstrap_servers(value: list[str]) -> str | None:
    """``controller.quorum.bootstrap.servers``: ``host:port`` entries (KIP-853),
    refused entry by entry as Kafka's QuorumConfig words it (a host with other
    characters, ``1@host:port`` pasted from the voters, is refused as a host
    name)."""
    for entry in value:
        host = entry.rpartition(":")[0]
        if parse_host_port(entry) is None:
            part = "host name" if not _HOST.fullmatch(host) else "host port"
            return (f"Failed to parse {part} from {entry} for the configuration "
                    f'{QUORUM_BOOTSTRAP_SERVERS}. Each entry should be in the form "{{host}}:{{port}}"')
    return None


def _one_dir(value: list[str]) -> str | None:
    """log.dirs is a LIST as in Kafka; kcompat keeps its data in one directory."""
    if len(value) != 1:
        return "kcompat keeps its data in one directory: give exactly one"
    return None


_D = ConfigDef
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
BROKER_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        _D("node.id", "int", 1, minimum=0),
        _D("host", "string", "127.0.0.1"),
        _D("port", "int", 9092, minimum=0),
        _D("advertised.host", "string", ""),
        _D("log.dirs", "list", ["./data"], check=_one_dir),
        _D("num.partitions", "int", 1, minimum=1),
        _D("default.replication.factor", "int", 1, minimum=1),
        _D("auto.create.topics.enable", "boolean", True),
        _D("delete.topic.enable", "boolean", True),
        _D("message.max.bytes", "int", 1048588, minimum=0),
        _D("socket.request.max.bytes", "int", 104857600, minimum=1),
        _D("log.segment.bytes", "int", 1073741824, minimum=1 << 20, kafka_text=True),
        _D("log.roll.ms", "long", 604800000, minimum=1),
        _D("log.retention.ms", "long", 604800000, minimum=-1),
        _D("log.retention.bytes", "long", -1),
        _D("log.retention.check.interval.ms", "long", 300000, minimum=1),
        # the first retention check, after start (Kafka's LogManager: 30 s)
        _D("log.initial.task.delay.ms", "long", 30000, minimum=0),
        _D("log.index.interval.bytes", "int", 4096, minimum=0),
        _D("log.message.timestamp.type", "string", "CreateTime",
           choices=("CreateTime", "LogAppendTime")),
        _D("log.cleanup.policy", "list", ["delete"], choices=("delete", "compact")),
        _D("log.cleaner.enable", "boolean", True),
        _D("log.cleaner.backoff.ms", "long", 15000, minimum=0),
        _D("log.cleaner.dedupe.buffer.size", "long", 134217728, minimum=1024),
        _D("log.cleaner.min.cleanable.ratio", "double", 0.5, minimum=0, maximum=1),
        _D("log.cleaner.delete.retention.ms", "long", 86400000, minimum=0),
        _D("log.cleaner.min.compaction.lag.ms", "long", 0, minimum=0),
        _D("log.cleaner.max.compaction.lag.ms", "long", 9223372036854775807, minimum=1),
        _D("compression.type", "string", "producer",
           choices=("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")),
        _D("min.insync.replicas", "int", 1, minimum=1),
        _D("group.min.session.timeout.ms", "int", 6000, minimum=0),
        _D("group.max.session.timeout.ms", "int", 1800000, minimum=0),
        _D("group.initial.rebalance.delay.ms", "int", 3000, minimum=0),
        _D("group.max.size", "int", 2147483647, minimum=1),
        # KIP-848 / KIP-932 / KIP-1071 group coordinator: broker defaults of the
        # group configs (group_config.py) and the bounds a group's override must
        # keep (Kafka's GroupCoordinatorConfig and ShareGroupConfig, 4.4 defaults)
        _D("group.consumer.session.timeout.ms", "int", 45000, minimum=1),
        _D("group.consumer.min.session.timeout.ms", "int", 45000, minimum=1),
        _D("group.consumer.max.session.timeout.ms", "int", 60000, minimum=1),
        _D("group.consumer.heartbeat.interval.ms", "int", 5000, minimum=1),
        _D("group.consumer.min.heartbeat.interval.ms", "int", 5000, minimum=1),
        _D("group.consumer.max.heartbeat.interval.ms", "int", 15000, minimum=1),
        _D("group.consumer.assignment.interval.ms", "int", 1000, minimum=0),
        _D("group.consumer.min.assignment.interval.ms", "int", 0, minimum=0),
        _D("group.consumer.max.assignment.interval.ms", "int", 15000, minimum=0),
        _D("group.consumer.assignor.offload.enable", "boolean", True, internal=True),
        _D("group.consumer.max.size", "int", 2147483647, minimum=1),
        _D("group.consumer.regex.refresh.interval.ms", "int", 600000, minimum=10000),
        _D("group.consumer.assignors", "list", ["uniform", "range"],
           choices=("uniform", "range")),
        _D("group.share.session.timeout.ms", "int", 45000, minimum=1),
        _D("group.share.min.session.timeout.ms", "int", 45000, minimum=1),
        _D("group.share.max.session.timeout.ms", "int", 60000, minimum=1),
        _D("group.share.heartbeat.interval.ms", "int", 5000, minimum=1),
        _D("group.share.min.heartbeat.interval.ms", "int", 5000, minimum=1),
        _D("group.share.max.heartbeat.interval.ms", "int", 15000, minimum=1),
        _D("group.share.max.size", "int", 200, minimum=1, maximum=1000),
        _D("group.share.assignment.interval.ms", "int", 1000, minimum=0),
        _D("group.share.min.assignment.interval.ms", "int", 0, minimum=0),
        _D("group.share.max.assignment.interval.ms", "int", 15000, minimum=0),
        _D("group.share.assignor.offload.enable", "boolean", True, internal=True),
        _D("group.share.record.lock.duration.ms", "int", 30000, minimum=1000, maximum=3600000),
        _D("group.share.min.record.lock.duration.ms", "int", 15000, minimum=1000,
           maximum=30000),
        _D("group.share.max.record.lock.duration.ms", "int", 60000, minimum=30000,
           maximum=3600000),
        _D("group.share.delivery.count.limit", "int", 5, minimum=2, maximum=10),
        _D("group.share.min.delivery.count.limit", "int", 2, minimum=2, maximum=5),
        _D("group.share.max.delivery.count.limit", "int", 10, minimum=5, maximum=25),
        _D("group.share.partition.max.record.locks", "int", 2000, minimum=100, maximum=10000),
        _D("group.share.min.partition.max.record.locks", "int", 100, minimum=100,
           maximum=2000),
        _D("group.share.max.partition.max.record.locks", "int", 4000, minimum=2000,
           maximum=10000),
        _D("group.share.max.share.sessions", "int", 2000, minimum=1),
        _D("group.streams.session.timeout.ms", "int", 45000, minimum=1),
        _D("group.streams.min.session.timeout.ms", "int", 45000, minimum=1),
        _D("group.streams.max.session.timeout.ms", "int", 60000, minimum=1),
        _D("group.streams.heartbeat.interval.ms", "int", 5000, minimum=1),
        _D("group.streams.min.heartbeat.interval.ms", "int", 5000, minimum=1),
        _D("group.streams.max.heartbeat.interval.ms", "int", 15000, minimum=1),
        _D("group.streams.num.standby.replicas", "int", 0, minimum=0),
        _D("group.streams.max.standby.replicas", "int", 2, minimum=0),
        _D("group.streams.initial.rebalance.delay.ms", "int", 3000, minimum=0),
        _D("group.streams.assignment.interval.ms", "int", 1000, minimum=0),
        _D("group.streams.min.assignment.interval.ms", "int", 0, minimum=0),
        _D("group.streams.max.assignment.interval.ms", "int", 15000, minimum=0),
        _D("group.streams.assignor.offload.enable", "boolean", True, internal=True),
        _D("group.streams.task.offset.interval.ms", "int", 60000, minimum=1, internal=True),
        _D("group.streams.min.task.offset.interval.ms", "int", 15000, minimum=1, internal=True),
        _D("group.streams.num.warmup.replicas", "int", 2, minimum=0, internal=True),
        _D("group.streams.max.warmup.replicas", "int", 20, minimum=0, internal=True),
        _D("group.streams.acceptable.recovery.lag", "long", 10000, minimum=0, internal=True),
        _D("group.streams.rack.aware.assignment.tags", "list", []),
        _D("group.streams.assignors", "list", ["sticky"]),
        # KIP-1191 share-group dead-letter topics
        _D("errors.deadletterqueue.auto.create.topics.enable", "boolean", False),
        _D("errors.deadletterqueue.topic.name.prefix", "string", "dlq."),
        _D("offsets.topic.num.partitions", "int", 50, minimum=1),
        _D("offsets.topic.replication.factor", "short", 3, minimum=1),
        _D("offsets.topic.segment.bytes", "int", 104857600, minimum=1),
        _D("offsets.retention.minutes", "int", 10080, minimum=1),
        # how often expired offsets, then empty groups without offsets, are deleted
        _D("offsets.retention.check.interval.ms", "long", 600000, minimum=1),
        _D("offset.metadata.max.bytes", "int", 4096, minimum=0),
        _D("transaction.max.timeout.ms", "int", 900000, minimum=1),
        _D("transaction.state.log.num.partitions", "int", 50, minimum=1),
        _D("transaction.state.log.replication.factor", "short", 3, minimum=1),
        _D("transaction.state.log.segment.bytes", "int", 104857600, minimum=1),
        _D("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000,
           minimum=1),
        # __kc_schedule: the delayed records (docs/extensions.md), created on first use
        _D("kc.schedule.topic.num.partitions", "int", 10, minimum=1),
        _D("kc.schedule.topic.replication.factor", "short", 3, minimum=1),
        _D("kc.schedule.topic.segment.bytes", "int", 64 << 20, minimum=1 << 20),
        # a schedule partition snapshots its state (and drops what it no longer
        # needs) once this many records, or half its pending count, came after the last
        _D("kc.schedule.snapshot.min.records", "int", 100_000, minimum=1),
        # __share_group_state: share-partition state (KIP-932), created on first use
        _D("share.coordinator.state.topic.num.partitions", "int", 50, minimum=1),
        _D("share.coordinator.state.topic.replication.factor", "short", 3, minimum=1),
        _D("share.coordinator.state.topic.segment.bytes", "int", 104857600, minimum=1),
        # a key's snapshot after this many updates, and the log prefix no key
        # needs dropped this often (broker.share_compaction)
        _D("share.coordinator.snapshot.update.records.per.snapshot", "int", 500, minimum=0,
           maximum=500),
        _D("share.coordinator.state.topic.prune.interval.ms", "int", 300000, minimum=1),
        _D("kcompat.flush.mode", "string", "acks_all", choices=("acks_all", "always", "never")),
        _D("kcompat.cluster.id", "string", ""),
        # Shards: broker processes this node runs, one per core it should use
        # (``node.shards``); 0 = one per core of the machine
        _D("kcompat.cores", "int", 1, minimum=0),
        # the machine a broker runs on, which its shards share: never two
        # replicas of a partition on one (``placement``); empty = its node id
        _D("kcompat.machine.id", "string", ""),
        # which shard of its node this process is; set by the supervisor
        # (-1: not a shard)
        _D("kcompat.shard", "int", -1, minimum=-1),
        # every served API version's codec loaded in the background once the broker
        # serves (``server._warm_codec``); false: each loads on its first request, which
        # saves a short-lived broker (a test's) about 2 s of CPU
        _D("kcompat.codec.warm", "boolean", True),
        # every step of the event loop at least this long logged on kcompat.loop.trace
        # (``loop_monitor``), to find what a slow answer waited for; 0: off
        _D("kcompat.loop.trace.ms", "int", 0, minimum=0),
        # Fetch sends record sets from the segment files with sendfile (zero_copy)
        _D("kcompat.fetch.sendfile", "boolean", True),
        _D("admin.port", "int", 9644, minimum=-1),  # 0 picks a free port, -1 disables
        _D("admin.host", "string", ""),  # empty: the same as host
        _D("admin.token", "password", ""),  # a bearer token every admin HTTP request must carry
        # HTTPS on the admin port: auto = when a Kafka listener speaks TLS (its keystore)
        _D("admin.tls", "string", "auto", choices=("auto", "true", "false")),
        # Empty: a quorum of one (this broker alone); else the controllers, each
        # also a broker unless process.roles says otherwise.
        _D("controller.quorum.voters", "list", []),  # "1@host:port,2@host:port,..."
        # KIP-853: where a node finds the metadata quorum ("host:port,..." of
        # running nodes, no ids); a node started with it and without the
        # voters asks them for the voters (``quorum_bootstrap``)
        _D(QUORUM_BOOTSTRAP_SERVERS, "list", [], check=_bootstrap_servers),
        # KRaft's roles: "broker,controller" (a voter that hosts partitions),
        # "broker" (hosts partitions, follows the metadata log as an observer,
        # joins a running cluster) or "controller" (a voter that hosts none)
        _D("process.roles", "list", ["broker", "controller"], choices=("broker", "controller"),
           check=lambda v: None if v else "name broker, controller or both"),
        _D("kcompat.raft.tick.ms", "int", 50, minimum=1),
        _D("kcompat.raft.election.timeout.ms", "int", 1000, minimum=1),
        # KRaft's: how long a follower of the metadata quorum goes without word
        # from its leader before it campaigns (at least the election timeout)
        _D("controller.quorum.fetch.timeout.ms", "int", 2000, minimum=1),
        # Move leadership back to the preferred (first) replica.
        _D("auto.leader.rebalance.enable", "boolean", True),
        _D("leader.imbalance.check.interval.seconds", "long", 300, minimum=1),
        # Broker heartbeats to the controller, fencing after silence.
        _D("broker.heartbeat.interval.ms", "int", 2000, minimum=1),
        _D("broker.session.timeout.ms", "int", 9000, minimum=1),
        _D("broker.rack", "string", ""),  # empty: no rack
        # consumers' reads from followers (KIP-392, ``read_replicas``): empty
        # (Kafka's null) or Kafka's RackAwareReplicaSelector
        _D("replica.selector.class", "string", "", check=lambda v: None if v in (
            "", RACK_AWARE_SELECTOR) else f"{v!r} is not a replica selector kcompat has (it has "
           f"{RACK_AWARE_SELECTOR}; unset, leaders serve every read)"),
        # ACLs (``kcompat.security.acl``): Kafka's StandardAuthorizer, or none ("": every
        # request allowed, the ACL APIs answer SECURITY_DISABLED). super.users and
        # allow.everyone.if.no.acl.found are the authorizer's keys, not KafkaConfig's:
        # DescribeConfigs does not list them (internal), as Kafka does not
        _D("authorizer.class.name", "string", "", check=lambda v: None if v in (
            "", STANDARD_AUTHORIZER) else f"{v!r} is not an authorizer kcompat has (it has "
           f"{STANDARD_AUTHORIZER}; unset, no authorizer)"),
        _D("super.users", "string", "", internal=True),  # "User:admin;User:bob"
        _D("allow.everyone.if.no.acl.found", "boolean", False, internal=True),
        # client byte-rate quotas (``quotas``): the samples of a rate and their length
        _D("quota.window.num", "int", 11, minimum=1),
        _D("quota.window.size.seconds", "int", 1, minimum=1),
        _D("controller.quota.window.num", "int", 11, minimum=1),
        # connection limits (``connection_quotas``)
        _D("max.connections", "int", 2147483647, minimum=0),
        _D("max.connection.creation.rate", "int", 2147483647, minimum=0),
        # a connection that sends nothing for this long is closed (per listener too)
        _D("connections.max.idle.ms", "long", 600000, minimum=1),
        _D("max.connections.per.ip", "int", 2147483647, minimum=0),
        _D("max.connections.per.ip.overrides", "string", "", check=_host_counts),
        _D("controller.quota.window.size.seconds", "int", 1, minimum=1),
        _D("controlled.shutdown.enable", "boolean", True),
        _D("replica.lag.time.max.ms", "long", 30000, minimum=1),
        # Snapshot the metadata log after this many applied bytes.
        _D("metadata.log.max.record.bytes.between.snapshots", "long", 20971520, minimum=1),
        # Listeners and security (``listeners``): Kafka's keys and defaults. Unset
        # ``listeners`` is one PLAINTEXT listener on host:port.
        _D("listeners", "list", []),
        _D("advertised.listeners", "list", []),
        _D("listener.security.protocol.map", "string",
           "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"),
        _D("inter.broker.listener.name", "string", ""),
        _D("security.inter.broker.protocol", "string", "PLAINTEXT",
           choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
        _D("sasl.enabled.mechanisms", "list", ["GSSAPI"]),
        _D("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI"),
        _D("sasl.jaas.config", "password", ""),
        _D("sasl.server.max.receive.size", "int", 524288, minimum=1),
        _D("connections.max.reauth.ms", "long", 0, minimum=0),
        _D("connection.failed.authentication.delay.ms", "int", 100, minimum=0),
        _D("ssl.keystore.type", "string", "JKS"),
        _D("ssl.keystore.location", "string", ""),
        _D("ssl.keystore.password", "password", ""),
        _D("ssl.key.password", "password", ""),
        _D("ssl.keystore.key", "password", ""),
        _D("ssl.keystore.certificate.chain", "password", ""),
        _D("ssl.truststore.type", "string", "JKS"),
        _D("ssl.truststore.location", "string", ""),
        _D("ssl.truststore.password", "password", ""),
        _D("ssl.truststore.certificates", "password", ""),
        _D("ssl.client.auth", "string", "none", choices=("none", "requested", "required")),
        _D("ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"],
           choices=("TLSv1.2", "TLSv1.3")),
        _D("ssl.protocol", "string", "TLSv1.3"),
        _D("ssl.cipher.suites", "list", []),
        _D("ssl.principal.mapping.rules", "string", "DEFAULT"),
        _D("ssl.endpoint.identification.algorithm", "string", "https"),
    )
}


@dataclass
class BrokerConfig:
    values: dict[str, Any]
    explicit: set[str] = field(default_factory=set)  # keys set by file, flag or env
    # the dynamic broker configs that apply to this broker (``dynamic_config``):
    # typed values over the static ones, and each one's source
    dynamic: dict[str, Any] = field(default_factory=dict)
    dynamic_sources: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        if key in self.dynamic:
            return self.dynamic[key]
        return self.values[key]

    @property
    def data_dir(self) -> Path:
        return Path(self.values["log.dirs"][0])

    def for_listener(self, listener: str, key: str) -> Any:
        """``key`` as the listener sees it: its ``listener.name.<listener>.<key>``
        value if set (dynamic, else static), else the broker's."""
        name = f"{LISTENER_PREFIX}{listener.lower()}.{key}"
        own = self.dynamic.get(name, self.values.get(name))
        return self[key] if own is None else own

    def explicit_values(self) -> dict[str, Any]:
        """Values set by file, flag or env, and the dynamic ones over them:
        the broker defaults of topic configs."""
        return {**{k: self.values[k] for k in self.explicit}, **self.dynamic}


LISTENER_PREFIX = "listener.name."
_JAAS_SUFFIX = "sasl.jaas.config"
#: what a static listener.name.<listener>.<key> may set (``definition_of``)
LISTENER_KEYS = ("the ssl.* and sasl.* keys, <mechanism>.sasl.jaas.config, "
                 "connections.max.reauth.ms, max.connections, max.connection.creation.rate "
                 "and connections.max.idle.ms")


def definition_of(key: str) -> ConfigDef | None:
    """The definition of ``key``, also of a listener's own value of a key
    (``listener.name.<listener>.<key>``, and ``<mechanism>.sasl.jaas.config``
    under it, as Kafka's brokers take a JAAS config per listener and
    mechanism)."""
    definition = BROKER_CONFIGS.get(key)
    if definition is not None or not key.startswith(LISTENER_PREFIX):
        return definition
    listener, _, rest = key[len(LISTENER_PREFIX):].partition(".")
    if not listener or not rest:
        return None
    base = BROKER_CONFIGS.get(rest)
    if base is None and rest.endswith("." + _JAAS_SUFFIX):
        base = BROKER_CONFIGS[_JAAS_SUFFIX]
    if base is None or not (rest.startswith(("ssl.", "sasl.", "connections.max.reauth"))
                            or rest.endswith(_JAAS_SUFFIX)
                            or rest in ("max.connections", "max.connection.creation.rate",
                                        "connections.max.idle.ms")):
        return None
    return ConfigDef(key, base.type, base.default, base.choices, base.minimum, base.maximum,
                     sensitive=base.secret, check=base.check)


def _apply(values: dict[str, Any], explicit: set[str], layer: Mapping[str, Any], origin: str) -> None:
    for key, raw in layer.items():
        definition = definition_of(key)
        if definition is None and key.startswith(LISTENER_PREFIX) and key.count(".") > 2:
            base = key[len(LISTENER_PREFIX):].partition(".")[2]
            raise ConfigError(key, f"{base} cannot be set per listener: a "
                              f"{LISTENER_PREFIX}<listener>. prefix takes {LISTENER_KEYS} "
                              f"(from {origin})")
        if definition is None:
            raise ConfigError(key, f"unknown broker config (from {origin})")
        values[key] = definition.parse(raw)
        explicit.add(key)


def _flatten(doc: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Allow nested YAML (``log: {retention.ms: 1}``) as well as dotted keys."""
    out: dict[str, Any] = {}
    for k, v in doc.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def load_yaml(path: Path) -> dict[str, Any]:
    """A YAML mapping of keys — or, named ``*.properties``, a Kafka
    ``server.properties`` file as it is."""
    if path.suffix == ".properties":
        try:
            return properties.parse(path.read_text(encoding="utf-8"), str(path))
        except OSError as e:
            raise ConfigError("--config", f"cannot read {path}: {e.strerror}") from None
        except (UnicodeDecodeError, ValueError) as e:
            raise ConfigError("--config", str(e)) from None
    import yaml  # only for a YAML config file: 15 ms of every broker's and command's start

    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except OSError as e:
        raise ConfigError("--config", f"cannot read {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError("--config", f"{path} is not valid YAML: {e}") from None
    if not isinstance(doc, Mapping):
        raise ConfigError("--config", f"{path} must hold a mapping of config keys")
    return _flatten(doc)


#: a file the broker writes once it serves (``node.shards``: how its
#: supervisor learns it is ready)
READY_FILE_ENV = "KCOMPAT_READY_FILE"
#: rules the C module out (``ext.native``): the Python loops measured alone
PURE_PYTHON_ENV = "KCOMPAT_PURE_PYTHON"
NOT_CONFIG_ENV = frozenset({"KCOMPAT_LOG_LEVEL", "KCOMPAT_LOG_FORMAT",
                            "KCOMPAT_LOOP_REPORT_EVERY_S", READY_FILE_ENV, PURE_PYTHON_ENV})


def from_env(environ: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for name, value in environ.items():
        if name.startswith("KCOMPAT_") and name not in NOT_CONFIG_ENV:
            out[name[len("KCOMPAT_"):].lower().replace("_", ".")] = value
    return out


def load(
    config_file: Path | None,
    flags: Mapping[str, Any],
    environ: Mapping[str, str],
) -> BrokerConfig:
    values = {k: d.default for k, d in BROKER_CONFIGS.items()}
    explicit: set[str] = set()
    if config_file is not None:
        _apply(values, explicit, load_yaml(config_file), str(config_file))
    _apply(values, explicit, flags, "command line")
    _apply(values, explicit, from_env(environ), "environment")
    return BrokerConfig(values, explicit)
