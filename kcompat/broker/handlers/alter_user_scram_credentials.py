"""AlterUserScramCredentials (key 51), version 0 (KIP-554; ``kafka-configs.sh
--alter --entity-type users --add-config 'SCRAM-SHA-512=[...]'``).

Quirks: the request is answered as Kafka 4.4's controller answers it
(``controller.scram_credentials.plan``): per user, deletions before
upsertions, a user altered twice DUPLICATE_RESOURCE (neither alteration
done), an empty user or too few (< 4096) / too many (> 16384) iterations
UNACCEPTABLE_CREDENTIAL, an unknown mechanism UNSUPPORTED_SASL_MECHANISM,
deleting what does not exist RESOURCE_NOT_FOUND, an empty salted password
UNKNOWN_SERVER_ERROR without a message; results in Kafka's (hash map) order.
The salted password is turned into the stored and server keys here: only
those leave this broker. The valid changes are carried out by the
controller (forwarded from any broker, ``controller.admin``) as one
``scram_credentials`` metadata record, so every broker sees them together
and they survive restarts; the answer waits (bounded) until this broker's
image shows them. If the change fails (the controller found a credential to
delete gone, or none answered in time), every user whose change was valid
gets that error.

Without ALTER on the cluster (an authorizer configured) nothing is done and
every user named is UNKNOWN_SERVER_ERROR without a message, users sorted:
what Kafka 4.4 answers (measured: its controller, which the request is
forwarded to, refuses it; the answer is built by
``AlterUserScramCredentialsRequest.getErrorResponse``).
"""

from __future__ import annotations

from typing import Any

import trio
from kio.schema.errors import ErrorCode

from kcompat.broker.controller import scram_credentials as sc
from kcompat.broker.controller.admin import submit
from kcompat.broker.handlers._common import NO_THROTTLE
from kcompat.broker.host.context import RequestContext
from kcompat.broker.storage.state import TopicError
from kcompat.security import acl

#: how long an answer waits for this broker's image to show a committed change
APPLY_WAIT_S = 5.0


def _denied(request: Any) -> list[tuple[str, sc.Error]]:
    users = {x.name for x in (*request.deletions, *request.upsertions)}
    return [(user, (ErrorCode.unknown_server_error, None)) for user in sorted(users)]


def _applied(ctx: RequestContext, ops: list[sc.Op]) -> bool:
    credentials = ctx.state.metadata.image.scram_credentials
    return all(credentials.get(mechanism, {}).get(user) == credential
               for user, mechanism, credential in ops)


async def _alter(ctx: RequestContext, request: Any) -> list[tuple[str, sc.Error]]:
    credentials = ctx.state.metadata.image.scram_credentials
    results, ops = sc.plan(
        [(d.name, int(d.mechanism)) for d in request.deletions],
        [sc.Upsertion(u.name, int(u.mechanism), int(u.iterations), u.salt, u.salted_password)
         for u in request.upsertions],
        lambda user, mechanism: user in credentials.get(mechanism, {}))
    if not ops:
        return results
    try:
        await submit(ctx.controller, {"op": "alter_scram_credentials", "name": "",
                                      "ops": sc.encode_ops(ops)})
    except TopicError as e:
        failed: sc.Error = (e.code, e.message)
        return [(user, failed if error[0] == ErrorCode.none else error)
                for user, error in results]
    with trio.move_on_after(APPLY_WAIT_S):
        while not _applied(ctx, ops):
            await trio.sleep(ctx.cluster.tick_s)
    return results


async def handle(ctx: RequestContext, request: Any) -> Any:
    if ctx.authorize(acl.Operation.ALTER, acl.ResourceType.CLUSTER, acl.CLUSTER_NAME):
        results = await _alter(ctx, request)
    else:
        results = _denied(request)
    return ctx.response(throttle_time=NO_THROTTLE, results=tuple(
        ctx.build("AlterUserScramCredentialsResult", user=user, error_code=code,
                  error_message=message)
        for user, (code, message) in results))
