"""What a handler receives with each request."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from kcompat.broker.groups import GroupService
from kcompat.broker.state import BrokerState
from kcompat.broker.transactions import TxnService
from kcompat.wire import codec


@dataclass(slots=True)
class RequestContext:
    state: BrokerState
    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    client_host: str = ""

    @property
    def txns(self) -> TxnService:
        assert self.state.txns is not None, "transaction service not started"
        return self.state.txns

    @property
    def groups(self) -> GroupService:
        assert self.state.groups is not None, "group service not started"
        return self.state.groups

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
