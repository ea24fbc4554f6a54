"""Network and security plumbing below the handlers.

Theory of operation
-------------------
``listeners`` parses Kafka's listener settings and says what each listener
asks of a connection (TLS, SASL mechanisms); ``tls_stream`` runs OpenSSL over
memory buffers for a TLS listener; ``session`` is what one connection knows
of its peer once authenticated (principal, listener, address);
``peer_security`` secures the inter-broker link as a client. Limits and
quotas are enforced here too: ``connection_quotas`` (Kafka's connection
limits and rates), ``quotas`` (produce, fetch and request quotas with their
throttle times). ``zero_copy`` sends fetched record bytes straight from the
segment files. The connection loop that uses them lives in ``node``.
"""
