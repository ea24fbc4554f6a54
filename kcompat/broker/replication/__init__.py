"""Replication: the Multi-Raft driver (groups, ticks, Ready rounds, transport)
and replica management (partition groups, ISR, log starts, the replicated
state machine host). See ``runtime`` for the theory of operation."""
