"""Consumer groups and share groups at run time (the cores are ``kcompat.group``).

Theory of operation
-------------------
``groups`` hosts the group coordinator on ``__consumer_offsets``: parked
JoinGroup/SyncGroup requests, timers, the offsets log. ``hosted_groups``
hosts the KIP-848 and KIP-932 group state machines at their coordinator;
``consumer_groups`` serves KIP-848 consumer groups and ``share_groups`` the
membership and assignment of share groups. A share group's records live at
each partition's leader: ``shares`` keeps the share-partitions (acquired,
acknowledged, archived records and their delivery counts) with
``share_reads`` reading the log for them, ``share_sessions`` the share
sessions of KIP-932, ``share_writes`` the coalesced writes of their state to
``__share_group_state``, ``share_compaction`` its snapshots and prefix
deletion, ``share_dead_letters`` the copies to a dead-letter topic, and
``share_metrics`` their gauges.
"""
