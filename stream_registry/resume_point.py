"""A stream's resume point: the offset of each partition where the stream starts if started now.

One rule, used by `StreamRegistry.describe` (the `resume_offset` column) and by
the backfill's hand-off (`--until committed` for a registered stream), so the
two can never disagree. Per partition, the first that applies:

1. a pending offset: accepted by set_offset but not applied yet (the stream was
   stopped, or no member of its group held the partition);
2. for an exactly-once stream, the offset its sink stores with the data, or the
   log start when the sink holds nothing of the partition (the graph has none of it);
3. the consumer group's committed offset;
4. auto.offset.reset: the log end for latest/end/largest, else the log start.

Plain functions over values: the caller gathers the pending offsets (state
store), the stored offsets (sink) and the partition snapshots (Kafka).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from .config import CONSUMER_DEFAULTS, Delivery, StreamConfig
from .model import PartitionKey, PartitionSnapshot

_FROM_END = ("latest", "end", "largest")


def resume_offset(snap: PartitionSnapshot, *, pending: Mapping[PartitionKey, int],
                  stored: Mapping[PartitionKey, int] | None, exactly_once: bool, from_end: bool,
                  guess: bool = True) -> int | None:
    """Where one partition resumes; None for an exactly-once stream whose sink could not be read (`stored`
    None) and that has no pending offset for the partition, and with guess=False (where the stream stands
    now, as relative offset changes count from it) for a partition without an offset yet (rule 4)."""
    key = PartitionKey(snap.topic, snap.partition)
    if key in pending:
        return pending[key]
    if exactly_once:
        return None if stored is None else stored.get(key, snap.log_start)
    if snap.committed is not None or not guess:
        return snap.committed
    return snap.log_end if from_end else snap.log_start


def resume_offsets(config: StreamConfig, snapshots: Iterable[PartitionSnapshot], pending: Mapping[PartitionKey, int],
                   stored: Mapping[PartitionKey, int] | None, guess: bool = True) -> dict[PartitionKey, int | None]:
    """`resume_offset` of every snapshot, with the stream's delivery and auto.offset.reset."""
    exactly_once = config.delivery == Delivery.EXACTLY_ONCE
    reset = config.configs.get("auto.offset.reset", CONSUMER_DEFAULTS["auto.offset.reset"])
    from_end = str(reset).lower() in _FROM_END
    return {PartitionKey(s.topic, s.partition): resume_offset(s, pending=pending, stored=stored, exactly_once=exactly_once,
                                                  from_end=from_end, guess=guess)
            for s in snapshots}
