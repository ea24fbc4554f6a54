"""One broker process's parts, wired together.

Theory of operation
-------------------
The layers, bottom up (import-linter keeps them so): ``BrokerState`` (config,
metadata image, local partitions); the replication runtime (the Multi-Raft
driver and replica management, ``replication``) with its request/reply calls
between brokers; the controller (``controller``: the metadata log's state
machine, registration and liveness, topic changes); the services — the group
and transaction coordinators, each the replicated state machine of its
internal topic —, delayed delivery (the state machine of ``__kc_schedule``),
share groups (their coordinator, and the share-partitions at the partitions'
leaders with the state machine of ``__share_group_state``) and the metrics. ``Broker`` builds them in that order and
lets each upper part register what the lower ones call back (tick hooks,
inbound messages, state machines), so no lower layer knows an upper one.
Handlers receive it in their ``RequestContext``.

Without ``controller.quorum.voters`` the broker is a quorum of one: itself the
only voter, running the same code as a cluster (docs/architecture.md, Replication) — unless
``controller.quorum.bootstrap.servers`` names a running cluster, whose voters
the server learnt from it (``quorum_bootstrap``) and passes in as ``voters``. The store (its
disk), the peer links and the randomness are the seams the broker-level
simulator replaces (``kcompat.testing.broker_sim``).
"""

from __future__ import annotations

import secrets
import time
from functools import partial
from random import Random

import trio

from kcompat.broker.config.broker_config import BrokerConfig
from kcompat.broker.controller import admin
from kcompat.broker.controller.quorum import Controller
from kcompat.broker.controller.reassignment import Mover
from kcompat.broker.ext.delays import DelayService
from kcompat.broker.groups.consumer_groups import ConsumerGroupService
from kcompat.broker.groups.groups import GroupService
from kcompat.broker.groups.share_groups import ShareGroupService
from kcompat.broker.groups.shares import ShareService
from kcompat.broker.host import lag_sources
from kcompat.broker.host.metrics import BrokerMetrics
from kcompat.broker.loop.backpressure import Backpressure
from kcompat.broker.net import listeners, peer_security
from kcompat.broker.net.connection_quotas import ConnectionQuotas
from kcompat.broker.net.quotas import ClientQuotas, QuotaConfig
from kcompat.broker.replication.peer_calls import PeerCalls
from kcompat.broker.replication.quorum_admin import QuorumAdmin
from kcompat.broker.replication.read_replicas import ReadReplicas
from kcompat.broker.replication.runtime import ClusterRuntime, lone_voter
from kcompat.broker.replication.transport import LinkFactory, PeerLink
from kcompat.broker.storage.state import BrokerState
from kcompat.broker.txn.transactions import TxnService
from kcompat.log.store import OS_STORE, FileStore
from kcompat.security import sasl
from kcompat.security.acl import AclStore, Authorizer, parse_super_users
from kcompat.security.oauthbearer import OAuthBearerServer
from kcompat.security.scram import ScramCredential, ScramServer


class Broker:
    def __init__(self, config: BrokerConfig, store: FileStore = OS_STORE,
                 links: LinkFactory | None = None, rng: Random | None = None,
                 voters: str | None = None) -> None:
        self.config = config
        # the listeners, the inter-broker one first; host and port are its own
        self.listeners = listeners.parse(config)
        if "listeners" in config.explicit:
            config.values["host"] = self.listeners[0].host
            config.values["port"] = self.listeners[0].port
        self.tls_contexts = {item.name: listeners.server_context(config, item)
                             for item in self.listeners if item.tls}
        self.bound_ports: dict[str, int] = {}  # listener -> its port, once bound (server)
        self.principal_rules = {item.name: listeners.principal_rules(config, item)
                                for item in self.listeners if item.tls}
        self.state = BrokerState(config, store)
        # None without ``authorizer.class.name``: every request allowed (RequestContext.authorize)
        self.authorizer = authorizer_of(config, self.state.metadata.image.acls)
        self.draining = False  # SIGTERM: connections close once idle (``connection``)
        self.idle_reads: set[trio.CancelScope] = set()
        in_cluster = bool(config["controller.quorum.voters"]
                          or config["controller.quorum.bootstrap.servers"])
        voters = (voters or ",".join(config["controller.quorum.voters"])
                  or lone_voter(self.state.node_id, config["host"], config["port"]))
        secure = peer_security.dialer(config, self.listeners[0],
                                      strict=in_cluster) if links is None else None
        if secure is not None:
            links = partial(PeerLink, secure=secure)
        self.cluster = ClusterRuntime(self.state, voters, links, rng)
        self.calls = PeerCalls(self.cluster)
        self.quorum_admin = QuorumAdmin(self.cluster, self.calls)  # ElectLeaders, DescribeQuorum
        self.read_replicas = ReadReplicas(self.cluster)  # Fetch: which replica serves a consumer
        self.controller = Controller(self.state, self.cluster, self.calls)
        admin.accept_forwarded(self.controller)
        self.mover = Mover(self.controller, admin.submit)  # partition reassignments
        self.groups = GroupService(self.state, self.cluster)
        self.consumer_groups = ConsumerGroupService(self.state, self.cluster, self.groups)
        self.consumer_groups.authorizer = self.authorizer
        self.txns = TxnService(self.state, self.cluster, self.calls, self.groups)
        self.delays = DelayService(self.state, self.cluster, self.calls, self.controller)
        self.shares = ShareService(self.state, self.cluster, self.calls, self.controller)
        self.share_groups = ShareGroupService(self.state, self.cluster, self.groups,
                                              self.shares)
        # produce and fetch byte-rate quotas (the values in the metadata image)
        self.quotas = ClientQuotas.of_config(QuotaConfig.of(config),
                                             mutations=QuotaConfig.of(config, "controller."))
        # connections per IP, listener and broker, and each IP's creation rate
        self.connection_quotas = ConnectionQuotas(
            config, self.listeners[0].name, lambda: self.state.metadata.image.client_quotas,
            len(self.listeners))
        # counters and gauges for /metrics (http.ops)
        self.metrics = BrokerMetrics(self.state, self.groups.store)
        self.delays.export(self.metrics.registry)
        # services behind on what clients feed them slow those clients
        self.backpressure = Backpressure()
        lag_sources.register_all(self.backpressure, self.state, self.cluster, self.delays,
                                 self.shares)
        self.backpressure.export(self.metrics.registry)
        self.shares.export(self.metrics.registry)
        self.cluster.faults.export(self.metrics.registry)  # kcompat_storage_errors_total
        self.cluster.leader_gaps.export(self.metrics.registry)  # kcompat_metadata_leader_gap_*
        self.state.flusher.export(self.metrics.registry)  # kcompat_fsync_pass_seconds

    def sasl_mechanisms(self, listener: listeners.Listener) -> list[str]:
        return listeners.mechanisms(self.config, listener) if listener.sasl else []

    def sasl_server(self, listener: listeners.Listener, mechanism: str,
                    reauthentication: bool = False) -> sasl.SaslServer:
        """A fresh server side of ``mechanism`` for one authentication on
        ``listener`` (``reauthentication``: KIP-368's, worded so when refused)."""
        if mechanism == sasl.PLAIN:
            return sasl.PlainServer(listeners.plain_users(self.config, listener).get)
        if mechanism == sasl.OAUTHBEARER:
            return OAuthBearerServer(lambda: time.time() * 1000,
                                     **listeners.oauthbearer_options(self.config, listener))
        return ScramServer(mechanism, partial(self.scram_credential, mechanism),
                           secrets.token_urlsafe(18), reauthentication=reauthentication)

    def scram_credential(self, mechanism: str, user: str) -> ScramCredential | None:
        """``user``'s SCRAM credential for ``mechanism`` (``SCRAM-SHA-256`` or
        ``SCRAM-SHA-512``) in this broker's metadata image, None without one
        (``controller.scram_credentials``: AlterUserScramCredentials)."""
        return self.state.metadata.image.scram_credentials.get(mechanism, {}).get(user)

    def close_idle_connections(self) -> None:
        """Drain: connections between requests close now, busy ones after their answer."""
        self.draining = True
        for scope in list(self.idle_reads):
            scope.cancel()

    def start_services(self, nursery: trio.Nursery) -> None:
        """The services' own tasks: coordinator timers, delayed deliveries."""
        nursery.start_soon(self.groups.run)
        nursery.start_soon(self.txns.run)
        nursery.start_soon(self.delays.run)
        nursery.start_soon(self.shares.run)
        nursery.start_soon(self.share_groups.run)
        nursery.start_soon(self.consumer_groups.run)

    def close(self) -> None:
        self.state.close()


def authorizer_of(config: BrokerConfig, acls: AclStore) -> Authorizer | None:
    """The authorizer ``authorizer.class.name`` names, reading the ACLs of the
    metadata image (applied in log order on every broker), or None."""
    if not config["authorizer.class.name"]:
        return None
    return Authorizer(acls, parse_super_users(config["super.users"]),
                      config["allow.everyone.if.no.acl.found"])
