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

No silent rewinds: where an exactly-once stream resumes elsewhere than where it
stood (its group's commit at an assignment; its own view of the sink's offsets
when a batch's compare-and-set finds others), `realignments` says so, per
partition, from where to where and why; the stream logs it and the history
records it (ChangeStatus.REALIGNED), which the lag verdict shows as REWIND.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from .config import CONSUMER_DEFAULTS, Delivery, StreamConfig
from .model import PartitionKey, PartitionSnapshot, Realignment

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



def realignments(stood: Mapping[PartitionKey, int | None], resumes: Mapping[PartitionKey, int],
                 why: Callable[[PartitionKey, int, int], str]) -> list[Realignment]:
    """The partitions that resume (`resumes`: where the sink says) elsewhere than where they `stood`, each with
    `why(partition, stood, resumes)`. A partition that stood nowhere (absent or None: nothing committed,
    nothing expected) is not a move. Sorted by partition."""
    return [Realignment(topic=tp[0], partition=tp[1], previous_offset=was, offset=offset,
                        reason=why(tp, was, offset))
            for tp, offset in sorted(resumes.items()) for was in [stood.get(tp)] if was is not None and was != offset]


def assignment_reason(stored: int | None, committed: int, offset: int) -> str:
    """Why an exactly-once stream resumes a just-assigned partition at `offset`, not at its group's commit
    (`stored`: what its sink stores, None for nothing)."""
    if stored is None:
        return (f"the sink stores no offset for it (a new, emptied or replaced sink, or its offsets deleted), so the "
                f"graph holds none of it: read again from the log start {offset}, not from the group's commit "
                f"{committed}")
    if stored < committed:
        return (f"the sink stores {stored}, behind the group's commit {committed} (restored, cut back or edited): "
                f"records {stored}..{committed - 1} are read again")
    return (f"the sink stores {stored}, ahead of the group's commit {committed} (written but not committed before "
            f"the stream stopped): nothing is read twice")


def conflict_reason(conflict: object) -> str:
    """Why a running exactly-once stream goes on from its sink's offsets after a batch's compare-and-set failed."""
    return f"the sink's stored offsets were changed under the running stream; its batch was dropped ({conflict})"
