"""Configuration: definitions, Kafka's key tables, and each kind of config.

Theory of operation
-------------------
``configdef`` types and validates a value (one ``ConfigDef`` per key);
``broker_config`` layers a broker's static config (defaults < YAML < flags <
``KCOMPAT_*`` env); ``broker_keys`` and ``kafka_broker_keys`` hold Apache
Kafka's broker keys as data, and ``broker_config_entries`` what DescribeConfigs
lists for a broker; ``dynamic_config`` the cluster-wide and per-broker
dynamic values; ``topic_config`` and ``group_config`` the per-topic and
per-group configs with their broker-level defaults; ``broker_loggers`` the
BROKER_LOGGER resources (log levels). Nothing here does I/O but reading a
YAML file at start.
"""
