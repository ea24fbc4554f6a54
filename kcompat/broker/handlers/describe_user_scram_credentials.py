"""DescribeUserScramCredentials (key 50), version 0 (KIP-554; ``kafka-configs.sh
--describe --entity-type users``).

Quirks: answered from this broker's metadata image as Kafka 4.4's
``ScramImage.describe`` answers (``controller.scram_credentials.describe``):
no user named (null or empty) lists every user with a credential; a named
user without one is RESOURCE_NOT_FOUND ("Attempt to describe a user
credential that does not exist: NAME"), a user named twice
DUPLICATE_RESOURCE, answered once; a user's credentials are its mechanisms
and iterations (never a key or salt), by mechanism type; users in Kafka's
(hash map) order.

Without DESCRIBE on the cluster (an authorizer configured) the answer is
Kafka's ``getErrorResponse``: CLUSTER_AUTHORIZATION_FAILED at the top and for
each user named (the results carry no user name), no message; for a null
list, which Kafka's answer fails on (a NullPointerException), no results.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.controller import scram_credentials as sc
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.host.context import RequestContext
from kcompat.security import acl


def _denied(ctx: RequestContext, request: Any) -> Any:
    code = ErrorCode.cluster_authorization_failed
    return ctx.response(throttle_time=NO_THROTTLE, error_code=code, error_message=None,
                        results=tuple(
                            ctx.build("DescribeUserScramCredentialsResult", user="",
                                      error_code=code, error_message=None, credential_infos=())
                            for _ in request.users or ()))


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(acl.Operation.DESCRIBE, acl.ResourceType.CLUSTER, acl.CLUSTER_NAME):
        return _denied(ctx, request)
    users = None if request.users is None else [u.name for u in request.users]
    found = sc.describe(ctx.state.metadata.image.scram_credentials, users)
    results = tuple(
        ctx.build("DescribeUserScramCredentialsResult", user=user, error_code=code,
                  error_message=message,
                  credential_infos=tuple(ctx.build("CredentialInfo", mechanism=mechanism,
                                                   iterations=iterations)
                                         for mechanism, iterations in infos))
        for user, (code, message), infos in found)
    return ctx.response(throttle_time=NO_THROTTLE, error_code=OK, error_message="",
                        results=results)
