"""Partitions as the broker hosts them: logs, appends, flushes, cleaning.

Theory of operation
-------------------
``state.BrokerState`` is the bottom of the broker's services: the config,
the data directory, the metadata log (``metadata``) and image, and the
partitions this broker hosts (``partition``: a log from ``kcompat.log``, its
leader epoch, who waits for data). ``append`` is the produce hot path into a
partition's log; ``flusher`` the group commit (one fsync serves every waiting
request); ``log_cleaner`` compacts ``cleanup.policy=compact`` logs;
``list_offsets_lookup`` finds offsets by time. The extension state a
partition carries lives here with it: ``dedup_windows`` (ids seen within a
topic's window), ``views`` (filtered views answered as batches with holes)
and ``hole_reads`` (fetch answers across batches that hold no record).
"""
