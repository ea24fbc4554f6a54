"""Segment storage of partition logs (docs/architecture.md, Storage).

Public surface: ``PartitionLog`` (one partition's log), ``LogConfig`` (its
settings), ``OffsetOutOfRange`` and ``FileSlice``. The other modules —
``segment``, ``index``, ``epoch_cache``, ``recovery``, ``files`` — are the
parts it is built from.
"""

from kcompat.log.config import LogConfig
from kcompat.log.partition_log import FileSlice, OffsetOutOfRange, PartitionLog

__all__ = ["FileSlice", "LogConfig", "OffsetOutOfRange", "PartitionLog"]
