"""DescribeCluster (key 60), versions 0-2.

Quirks: optional for clients (Java Admin falls back to Metadata; Spark's driver
and confluent-kafka's ``describe_cluster`` use it). One broker, which is also
the controller (the live brokers). v1 carries ``endpoint_type``: 1 (brokers) is served; 2
(controllers, asked by ``--bootstrap-controller`` tools) answers
UNSUPPORTED_ENDPOINT_TYPE on a broker-only node, like a Kafka broker listener.
A combined node has one listener, which is also its controller endpoint (the
address its quorum names it by): endpoint 2 there is answered as by a
controller, so Kafka's tools with ``--bootstrap-controller`` work against it
(against Kafka's combined nodes they are pointed at the separate controller
listener). A controller-only
node answers as Kafka's controller listener: endpoint 2 lists the controllers
(the metadata quorum's voters, at their ``controller.quorum.voters`` addresses)
and the active one, endpoint 1 (and v0) is MISMATCHED_ENDPOINT_TYPE. Without an
authorizer every cluster operation is allowed, so authorized operations (when
asked) are the cluster's full set. v2 (KIP-1073) marks each broker ``is_fenced``
and, when asked with ``include_fenced_brokers``, lists the registered brokers the
controller fenced too.
Authorization (Kafka's AuthHelper): anyone may describe the cluster;
include_cluster_authorized_operations answers the cluster's operations to a
principal that may DESCRIBE it, else 0.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcompat.broker.handlers import _authz
from kcompat.broker.handlers._common import NO_THROTTLE, OK
from kcompat.broker.host.context import RequestContext

BROKERS_ENDPOINT, CONTROLLERS_ENDPOINT = 1, 2
OMITTED_OPERATIONS = -(2**31)
# AclOperation ids a CLUSTER resource supports: CREATE 5, ALTER 7, DESCRIBE 8,
# CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12.
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))


def _controller_answer(ctx: RequestContext, request: Any, endpoint: int) -> Any:
    """A controller-only node, as Kafka's controller listener: the controllers
    (the metadata quorum's voters) and the active one, or MISMATCHED_ENDPOINT_TYPE
    when brokers are asked for (v0 asks for them)."""
    if endpoint != CONTROLLERS_ENDPOINT:
        return ctx.response(
            throttle_time=NO_THROTTLE, error_code=ErrorCode.mismatched_endpoint_type,
            error_message="The request was sent to an endpoint of type CONTROLLER, but we "
            "wanted an endpoint of type BROKER", endpoint_type=endpoint, cluster_id="",
            controller_id=-1, brokers=())
    cluster = ctx.cluster
    controllers = []
    for node in sorted(cluster.meta.raft.voters):
        where = cluster.voters.get(node) or cluster.endpoint(node)
        if where is not None:
            controllers.append(ctx.build("DescribeClusterBroker", broker_id=node, rack=None,
                                         host=where[0], port=where[1], is_fenced=False))
    operations = OMITTED_OPERATIONS
    if request.include_cluster_authorized_operations:
        operations = (ctx.authorized_operations(_authz.CLUSTER, _authz.CLUSTER_NAME)
                      if _authz.cluster(ctx, _authz.Op.DESCRIBE) else 0)
    return ctx.response(
        throttle_time=NO_THROTTLE, error_code=OK, error_message=None,
        endpoint_type=CONTROLLERS_ENDPOINT, cluster_id=ctx.state.cluster_id,
        controller_id=cluster.controller_id, brokers=tuple(controllers),
        cluster_authorized_operations=operations)


async def handle(ctx: RequestContext, request: Any) -> Any:
    endpoint = getattr(request, "endpoint_type", BROKERS_ENDPOINT)
    if ctx.state.controller_only or (endpoint == CONTROLLERS_ENDPOINT
                                     and "controller" in ctx.state.config["process.roles"]):
        return _controller_answer(ctx, request, endpoint)
    if endpoint != BROKERS_ENDPOINT:
        return ctx.response(
            throttle_time=NO_THROTTLE, error_code=ErrorCode.unsupported_endpoint_type,
            error_message="The request was sent to an endpoint of type BROKER, but we wanted "
            "an endpoint of type CONTROLLER",
            endpoint_type=endpoint, cluster_id=ctx.state.cluster_id, controller_id=-1, brokers=(),
        )
    # the live brokers; a random live one as the controller
    await ctx.controller.lifecycle.wait_serving(timeout_s=5.0)
    registered = ctx.cluster.image.brokers
    fenced = {n for n, b in registered.items() if b.fenced}
    brokers = tuple(
        ctx.build("DescribeClusterBroker", broker_id=node, rack=rack, host=host, port=port,
                  is_fenced=node in fenced)
        for node, host, port, rack in ctx.controller.lifecycle.broker_endpoints((), ctx.listener))
    if getattr(request, "include_fenced_brokers", False):
        listed = {b.broker_id for b in brokers} | {
            n for n, b in registered.items() if b.hidden}
        brokers += tuple(
            ctx.build("DescribeClusterBroker", broker_id=b.node_id, rack=b.rack, host=b.host,
                      port=b.port, is_fenced=True)
            for n, b in sorted(registered.items()) if n in fenced and n not in listed)
    # as from a Kafka 4 broker: a random live broker, which forwards admin requests
    controller_id = ctx.controller.lifecycle.advertised_controller(b.broker_id for b in brokers)
    operations = OMITTED_OPERATIONS
    if request.include_cluster_authorized_operations:  # 0 without DESCRIBE, as Kafka
        operations = (ctx.authorized_operations(_authz.CLUSTER, _authz.CLUSTER_NAME)
                      if _authz.cluster(ctx, _authz.Op.DESCRIBE) else 0)
    return ctx.response(
        throttle_time=NO_THROTTLE, error_code=OK, error_message=None,
        endpoint_type=BROKERS_ENDPOINT, cluster_id=ctx.state.cluster_id,
        controller_id=controller_id, brokers=brokers,
        cluster_authorized_operations=operations,
    )
