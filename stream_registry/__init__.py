"""mgstreams core: a registry of Kafka streams with rebalance-gated offset control."""
from .config import StreamConfig
from .errors import StreamError
from .offset_spec import ChangeStatus, parse_offset_spec
from .offsets import HistoryEntry, OffsetChange, PartitionOffsets
from .registry import StreamRegistry, default_registry, reset_default_registry
from .stream_info import StreamInfo, StreamStatus

__all__ = [
    "ChangeStatus", "HistoryEntry", "OffsetChange", "PartitionOffsets", "StreamConfig", "StreamError",
    "StreamInfo", "StreamRegistry", "StreamStatus", "default_registry", "parse_offset_spec",
    "reset_default_registry",
]
