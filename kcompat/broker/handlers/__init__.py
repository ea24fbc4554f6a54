"""One module per API key; each starts with the versions it serves and quirks.

``HANDLERS`` maps an API key to ``async def handle(ctx, request) -> response``;
a handler returns ``None`` only when no response is due (acks=0 produce).
Every API in ``kcompat.wire.versions.API_RANGES`` must have a module here.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from typing import Any

from kcompat.broker.host.context import RequestContext
from kcompat.wire import versions as v

Handler = Callable[[RequestContext, Any], Awaitable[Any]]

_MODULES = {
    v.PRODUCE: "produce",
    v.FETCH: "fetch",
    v.LIST_OFFSETS: "list_offsets",
    v.METADATA: "metadata",
    v.FIND_COORDINATOR: "find_coordinator",
    v.API_VERSIONS: "api_versions",
    v.SASL_HANDSHAKE: "sasl_handshake",
    v.SASL_AUTHENTICATE: "sasl_authenticate",
    v.CREATE_TOPICS: "create_topics",
    v.DELETE_TOPICS: "delete_topics",
    v.DELETE_RECORDS: "delete_records",
    v.INIT_PRODUCER_ID: "init_producer_id",
    v.OFFSET_FOR_LEADER_EPOCH: "offset_for_leader_epoch",
    v.DESCRIBE_CONFIGS: "describe_configs",
    v.ALTER_CONFIGS: "alter_configs",
    v.CREATE_PARTITIONS: "create_partitions",
    v.INCREMENTAL_ALTER_CONFIGS: "incremental_alter_configs",
    v.DESCRIBE_CLUSTER: "describe_cluster",
    v.DESCRIBE_TOPIC_PARTITIONS: "describe_topic_partitions",
    v.ALTER_REPLICA_LOG_DIRS: "alter_replica_log_dirs",
    v.DESCRIBE_LOG_DIRS: "describe_log_dirs",
    v.ELECT_LEADERS: "elect_leaders",
    v.ALTER_PARTITION_REASSIGNMENTS: "alter_partition_reassignments",
    v.LIST_PARTITION_REASSIGNMENTS: "list_partition_reassignments",
    v.DESCRIBE_QUORUM: "describe_quorum",
    v.ADD_RAFT_VOTER: "add_raft_voter",
    v.REMOVE_RAFT_VOTER: "remove_raft_voter",
    v.UNREGISTER_BROKER: "unregister_broker",
    v.LIST_CONFIG_RESOURCES: "list_config_resources",
    v.DESCRIBE_CLIENT_QUOTAS: "describe_client_quotas",
    v.ALTER_CLIENT_QUOTAS: "alter_client_quotas",
    v.DESCRIBE_USER_SCRAM_CREDENTIALS: "describe_user_scram_credentials",
    v.ALTER_USER_SCRAM_CREDENTIALS: "alter_user_scram_credentials",
    v.DESCRIBE_ACLS: "describe_acls",
    v.CREATE_ACLS: "create_acls",
    v.DELETE_ACLS: "delete_acls",
    v.OFFSET_COMMIT: "offset_commit",
    v.OFFSET_FETCH: "offset_fetch",
    v.JOIN_GROUP: "join_group",
    v.HEARTBEAT: "heartbeat",
    v.LEAVE_GROUP: "leave_group",
    v.SYNC_GROUP: "sync_group",
    v.DESCRIBE_GROUPS: "describe_groups",
    v.LIST_GROUPS: "list_groups",
    v.DELETE_GROUPS: "delete_groups",
    v.OFFSET_DELETE: "offset_delete",
    v.ADD_PARTITIONS_TO_TXN: "add_partitions_to_txn",
    v.ADD_OFFSETS_TO_TXN: "add_offsets_to_txn",
    v.END_TXN: "end_txn",
    v.TXN_OFFSET_COMMIT: "txn_offset_commit",
    v.DESCRIBE_PRODUCERS: "describe_producers",
    v.DESCRIBE_TRANSACTIONS: "describe_transactions",
    v.LIST_TRANSACTIONS: "list_transactions",
    v.CONSUMER_GROUP_HEARTBEAT: "consumer_group_heartbeat",
    v.CONSUMER_GROUP_DESCRIBE: "consumer_group_describe",
    v.SHARE_GROUP_HEARTBEAT: "share_group_heartbeat",
    v.SHARE_GROUP_DESCRIBE: "share_group_describe",
    v.SHARE_FETCH: "share_fetch",
    v.SHARE_ACKNOWLEDGE: "share_acknowledge",
    v.DESCRIBE_SHARE_GROUP_OFFSETS: "describe_share_group_offsets",
    v.ALTER_SHARE_GROUP_OFFSETS: "alter_share_group_offsets",
    v.DELETE_SHARE_GROUP_OFFSETS: "delete_share_group_offsets",
}

HANDLERS: dict[int, Handler] = {
    key: importlib.import_module(f"{__name__}.{name}").handle for key, name in _MODULES.items()
}
