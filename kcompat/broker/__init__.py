"""The trio runtime of a broker, in rooms by concern.

Theory of operation
-------------------
Everything that does I/O, keeps time or runs tasks lives here; the cores it
hosts (``kcompat.wire``, ``log``, ``raft``, ``group``, ``txn``, ``ext``,
``security``) are pure. Each room is a package with its own theory of
operation; import-linter keeps them layered from top to bottom, a room
importing only the rooms below it:

``node``         the process: start-up, the listeners' accept loops, a
                 connection's life up to its handler
``http``         the admin port: /metrics, /health and the REST API (Confluent
                 REST Proxy v3 shapes), a hypercorn + starlette app whose
                 endpoints call the handlers in-process
``handlers``     one module per API key
``host``         the broker object that wires the services together, the
                 context a handler receives, the metrics gathered across them
``net``          listeners and their security, TLS, SASL sessions, connection
                 limits, client quotas, zero-copy sends
``txn``          the transaction coordinator's host and KIP-890 verification
``groups``       consumer groups (classic, KIP-848) and share groups (KIP-932)
``ext``          delayed delivery: the schedule log's host
``controller``   the metadata log's state machine and topic changes (KRaft)
``replication``  the Raft driver and replica management (Multi-Raft)
``storage``      partitions as the broker hosts them: logs, appends, group
                 commit, the cleaner, the metadata log, and the per-partition
                 extension state (dedup windows, filtered views)
``config``       config definitions and Kafka's key tables: broker, topic,
                 group, dynamic configs and loggers
``loop``         the event loop's own tools: offloading to threads, the
                 background lane, backpressure, the loop monitor

A request travels down: ``node.connection`` reads a frame, ``handlers``
serves it through ``host.context``, whose services (``groups``, ``txn``,
``ext``) and the ``controller`` write through ``replication`` to ``storage``.
"""
