"""Delayed delivery at run time (the cores are ``kcompat.ext``).

Theory of operation
-------------------
``delays`` hosts the schedule log ``__kc_schedule``: a produce whose records
carry ``kc-delay-ms`` or ``kc-deliver-at`` writes them there (in batches built
by ``delay_batches``), and the leader of each schedule partition delivers
them to their own partition when due, exactly once, with backpressure on
producers when delivery falls behind (``delay_pressure``) and a lateness
histogram (``lateness``). Retries and dead letters travel the same log.
Deduplication windows and filtered views are state of the partition they
apply to, so they live in ``storage`` next to it.
"""
