"""What a handler receives with each request."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from kcompat.broker.controller.quorum import Controller
from kcompat.broker.ext.delays import DelayService
from kcompat.broker.groups.consumer_groups import ConsumerGroupService
from kcompat.broker.groups.groups import GroupService
from kcompat.broker.groups.share_groups import ShareGroupService
from kcompat.broker.groups.shares import ShareService
from kcompat.broker.host.broker import Broker
from kcompat.broker.host.metrics import BrokerMetrics
from kcompat.broker.net.session import Session
from kcompat.broker.replication.runtime import ClusterRuntime
from kcompat.broker.storage.state import BrokerState
from kcompat.broker.txn.transactions import TxnService
from kcompat.security import acl
from kcompat.security.acl import Operation, ResourceType
from kcompat.security.principal import ANONYMOUS
from kcompat.wire import codec


@dataclass(frozen=True, slots=True)
class Later:
    """A handler's answer that is finished after it returned: on a pipelined
    connection (``Session.pipelined``) the connection reads and handles the
    next requests meanwhile, and sends every answer in request order
    (``connection``). ``finish`` gives the response (None: none)."""

    finish: Callable[[], Awaitable[Any]]


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    client_host: str = ""
    # who sent it (``kcompat.security.principal``): authenticated by SASL or a client
    # certificate on this connection, else ``User:ANONYMOUS``; and the listener's name
    principal: str = ANONYMOUS
    listener: str = ""
    session: Session | None = None  # the connection's (None: an internal call)
    request_size: int = 0  # the frame's bytes, header and body (Kafka's request.sizeInBytes)

    @property
    def state(self) -> BrokerState:
        return self.broker.state

    @property
    def cluster(self) -> ClusterRuntime:
        return self.broker.cluster

    @property
    def controller(self) -> Controller:
        return self.broker.controller

    @property
    def txns(self) -> TxnService:
        return self.broker.txns

    @property
    def groups(self) -> GroupService:
        return self.broker.groups

    @property
    def consumer_groups(self) -> ConsumerGroupService:
        return self.broker.consumer_groups

    @property
    def delays(self) -> DelayService:
        return self.broker.delays

    @property
    def shares(self) -> ShareService:
        return self.broker.shares

    @property
    def share_groups(self) -> ShareGroupService:
        return self.broker.share_groups

    @property
    def metrics(self) -> BrokerMetrics:
        return self.broker.metrics

    @property
    def resp(self) -> ModuleType:
        """kio module of this API's response at this version (nested classes)."""
        return codec.response_module(self.api_key, self.version)

    @property
    def response_class(self) -> type[Any]:
        return codec.response_class(self.api_key, self.version)

    def build(self, cls: type[Any] | str, **fields: Any) -> Any:
        """Build an entity of this response version; ``cls`` may be a class name."""
        entity: type[Any] = getattr(self.resp, cls) if isinstance(cls, str) else cls
        return codec.build(entity, **fields)

    def response(self, **fields: Any) -> Any:
        return codec.build(self.response_class, **fields)

    @property
    def client_address(self) -> str:
        """The client's address as ACL hosts name it (``client_host`` is Kafka's
        ``/127.0.0.1`` form, as DescribeGroups shows it)."""
        return self.client_host.removeprefix("/")

    # -- authorization (``kcompat.security.acl``; Kafka's AuthHelper) --------------------

    def authorize(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """May this request's principal, from its host, do ``operation`` on
        resource ``name`` of ``resource_type``? (The cluster is
        ``acl.CLUSTER_NAME``.) True when no authorizer is configured."""
        authorizer = self.broker.authorizer
        return authorizer is None or authorizer.authorize(
            self.principal, self.client_address, operation, resource_type, name)

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """The 32-bit field of operations on the resource this principal may do
        (Metadata, DescribeGroups, DescribeCluster): without an authorizer, every
        operation the resource type has."""
        authorizer = self.broker.authorizer
        if authorizer is None:
            return acl.bitfield(acl.SUPPORTED_OPERATIONS.get(resource_type, ()))
        return authorizer.authorized_operations(self.principal, self.client_address,
                                                resource_type, name)
