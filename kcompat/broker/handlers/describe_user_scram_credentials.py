"""DescribeUserScramCredentials (key 50), version 0.

Quirks: kcompat has no SASL/SCRAM yet (that is the security issue's, which
will answer with real credentials here), so no user has credentials, and this
says so in Kafka 4.4's words: no user named (null or empty) lists none; a
named user is RESOURCE_NOT_FOUND ("Attempt to describe a user credential
that does not exist: NAME"), a user named twice DUPLICATE_RESOURCE, answered
once. Kafka's ``kafka-configs.sh --describe --entity-type users`` asks this
next to DescribeClientQuotas and fails without it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.context import RequestContext
from kcompat.broker.handlers._common import NO_THROTTLE, OK


def _result(ctx: RequestContext, name: str, twice: bool) -> Any:
    if twice:
        code = ErrorCode.duplicate_resource
        message = ("Cannot describe SCRAM credentials for the same user twice in a single "
                   f"request: {name}")
    else:
        code = ErrorCode.resource_not_found
        message = f"Attempt to describe a user credential that does not exist: {name}"
    return ctx.build("DescribeUserScramCredentialsResult", user=name, error_code=code,
                     error_message=message, credential_infos=())


async def handle(ctx: RequestContext, request: Any) -> Any:
    names = [u.name for u in request.users or ()]
    counts = Counter(names)
    results = tuple(_result(ctx, name, counts[name] > 1) for name in dict.fromkeys(names))
    return ctx.response(throttle_time=NO_THROTTLE, error_code=OK, error_message="",
                        results=results)
