"""mgstreams core: a registry of Kafka streams with rebalance-gated offset control.

Subpackages: `kafka` (client access), `graph` (transformations, Cypher, sinks),
`registry` (the registry, its state and the per-stream poll loop). No mgp,
no pyspark and no HTTP here: the application (`mgstreams`) adds those.
"""
from .config import StreamConfig
from .errors import StreamError
from .model import (
                    ChangeStatus,
                    HistoryEntry,
                    OffsetChange,
                    PartitionOffsets,
                    PendingOffset,
                    PreviewStatement,
                    StreamInfo,
                    StreamStatus,
)
from .offset_spec import parse_offset_spec
from .registry import StreamRegistry

__all__ = [
    "ChangeStatus", "HistoryEntry", "OffsetChange", "PartitionOffsets", "PendingOffset", "PreviewStatement",
    "StreamConfig", "StreamError",
    "StreamInfo", "StreamRegistry", "StreamStatus", "parse_offset_spec",
]
