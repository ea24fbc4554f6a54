"""Security cores, pure (no sockets, files, clocks or randomness): principals,
the SASL mechanisms' server side (PLAIN, SCRAM), the ACL authorizer's rules
(Kafka's StandardAuthorizer), certificate principal mapping. The broker's
listeners, TLS and the connection's authentication state drive them
(``kcompat.broker.net.listeners``, ``kcompat.broker.node.connection``)."""
