"""The broker process: how it starts, listens, and takes each request in.

Theory of operation
-------------------
``server`` runs one node: it loads the config, opens the data directory and
builds the broker (``host.broker``), joins or finds the metadata quorum
(``quorum_bootstrap``, KIP-853), opens every listener and the admin HTTP port
(the ``http`` room: ``/metrics``, ``/health``, the REST API) and runs the background loops
until shutdown. Each accepted socket becomes a ``connection`` task: frames
in, responses out in request order, authentication first, then quotas and
the start gate, then the handler of the request's API key. What a connection
does before its handler runs is all in ``connection``.
"""
