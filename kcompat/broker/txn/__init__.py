"""The transaction coordinator's host (the core is ``kcompat.txn``).

Theory of operation
-------------------
``transactions`` hosts the coordinator on ``__transaction_state``: its
replicated log, the markers it writes to partitions and consumer offsets,
timeouts and recovery after a leader change. ``txn_verify`` is KIP-890 part
1 across brokers: a partition leader asks the transaction's coordinator
whether a transactional produce belongs to an ongoing transaction before
storing it.
"""
