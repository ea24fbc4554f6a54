"""The broker object that hosts every service, and what a handler sees of it.

Theory of operation
-------------------
``broker.Broker`` wires one broker's parts together: its state and
partitions (``storage``), the Raft driver (``replication``), the controller,
the group, share, transaction and delayed-delivery services, quotas and
listeners. ``context.RequestContext`` is what each handler receives with a
request: the broker's services, the connection's session, and the few
helpers every handler shares (leadership checks, waiting for metadata).
``metrics`` renders every service's gauges in Prometheus form, and
``lag_sources`` registers the services that can fall behind with the
backpressure registry (``loop.backpressure``).
"""
