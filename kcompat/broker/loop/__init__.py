"""The event loop's own tools: keeping every task's steps short.

Theory of operation
-------------------
One trio loop runs a broker, so no task may hold it for long. ``offload``
moves CPU-bound work to a few worker threads; ``lane`` gives catch-up work
one chunk per turn of the loop; ``backpressure`` lets a service that falls
behind slow the clients feeding it (throttle times, as quotas do);
``loop_monitor`` measures how long the loop keeps tasks waiting and the
longest single step per task kind (``kcompat_event_loop_lag_seconds``);
``collector`` runs the garbage collector between the loop's turns rather
than inside a step.
"""
