"""The admin port: the operator's endpoints and the REST API, on the broker's loop.

Theory of operation
-------------------
One HTTP port per node (``admin.port``, default 9644) serves ``/metrics``,
``/health`` and an HTTP API in the shapes of Confluent REST Proxy v3 under
``/v3``. The stack is a real one — hypercorn's trio worker serving a
starlette app — running in the node's own nursery, so a request is a task of
the broker's event loop like a Kafka connection's, with keep-alive, HTTP/1.1
and HTTP/2 handled by hypercorn rather than by hand.

The REST API is a Kafka client that skips the socket: each endpoint builds
the requests an admin client or producer would send and has their handlers
answer them in-process, for the HTTP caller's principal (``calls``); a
request another broker must answer travels there over the peer link in an
envelope. So an HTTP caller gets exactly what a Kafka client would — ACLs,
validation, quotas, the extension headers — with no second implementation of
any of it.

``admin_port`` binds the port (its rules: a secured broker answers on loopback
only unless ``admin.token`` is set) and ``serve`` runs hypercorn on it, the
only module that imports the HTTP stack (a broker with no admin port never
loads it); ``app`` routes and authenticates;
``ops`` has the operator's endpoints; ``rest`` what the REST endpoints share,
``rest_admin`` the cluster, brokers, topics, configs and partitions,
``rest_records`` producing.
"""
