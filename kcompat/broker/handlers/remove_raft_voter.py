"""RemoveRaftVoter (key 81), version 0 (KIP-853).

Quirks: removes a voter from the metadata quorum, as AddRaftVoter adds one
(``add_raft_voter``): any broker takes it, the metadata leader carries it
out and it is answered once committed. The removed node keeps following the
metadata log as an observer (a broker still, if it hosts partitions) — it can
be stopped, or added back. A leader removing itself hands the leadership to
the most caught-up voter once the change commits. VOTER_NOT_FOUND for a node
that is no voter and for the last voter (as Kafka 4.4 answers, with its
message less the directory ids).
"""

from __future__ import annotations

from typing import Any

from kcompat.broker.handlers.add_raft_voter import change
from kcompat.broker.host.context import RequestContext


async def handle(ctx: RequestContext, request: Any) -> Any:
    return await change(ctx, request, add=False)
