"""Records that left the log before a stream read them: where the partition goes on, and what was lost.

A stream's consumer runs with librdkafka's `auto.offset.reset=error`, so
librdkafka never moves a partition by itself: when a partition has no offset to
fetch from (an offset the log no longer holds, OFFSET_OUT_OF_RANGE; or nothing
committed where the assignment could not read that: `start_new` places a new
group's partitions in the assign itself) it stops fetching it and hands the worker an
`_AUTO_OFFSET_RESET` event carrying the offset it could not use. The worker asks
the partition's watermarks (one bounded call) and `decide` says, as a pure
function, where the partition goes on - the start the stream's own
`auto.offset.reset` names, as librdkafka would have chosen - and which records
were lost on the way: those from the offset that was out of range up to the new
start, when the log start had moved past it (retention). With
`on_data_loss: stop` the stream goes to error instead, naming the range, and its
committed offset stays where it was.

An offset past the log end (a log cut back by an unclean leader election) is no
loss: the partition goes on from the reset start and nothing is counted.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from ...config import DataLossPolicy
from ...model import PartitionKey, RecordsLost

OFFSET_BEGINNING, OFFSET_END = -2, -1   # librdkafka's raw constants
_STARTS = {"earliest": OFFSET_BEGINNING, "smallest": OFFSET_BEGINNING, "beginning": OFFSET_BEGINNING,
           "latest": OFFSET_END, "largest": OFFSET_END, "end": OFFSET_END}


@dataclass(frozen=True)
class ResetDecision:
    """Where the partition goes on (`start`: an offset, or a librdkafka logical start), what was lost on the way;
    or `fail`: why the stream stops instead."""
    start: int | None = None
    lost: RecordsLost | None = None
    fail: str | None = None


def reset_start(policy: object) -> int | None:
    """The logical start an `auto.offset.reset` value names; None for `error` (or anything else)."""
    return _STARTS.get(str(policy).strip().lower())


def start_new(starts: Mapping[PartitionKey, int | None], nothing_committed: Collection[PartitionKey],
              policy: object) -> dict[PartitionKey, int | None]:
    """`starts` (None: where the group resumes) with the partitions the group has committed nothing for named at
    the start auto.offset.reset says, as `decide` would place them (nothing lost), so that they are assigned there.
    Left to the group, librdkafka finds no offset, stops fetching them and reports _AUTO_OFFSET_RESET; the seek
    deciding it is refused then, so each reset reassigns, on an eager group every partition: what each had
    fetched ahead was dropped and fetched again (a new stream on a 6-partition backlog fetched and decompressed
    its records 2-4 times over in its first second: bench/multi_stream.py's stream processes)."""
    start = reset_start(policy)
    if start is None:
        return dict(starts)   # `error`: a partition with nothing committed fails the stream (decide), naming it
    return {tp: start if given is None and tp in nothing_committed else given for tp, given in starts.items()}


def decide(tp: PartitionKey, at: int, watermarks: tuple[int, int] | None, policy: object,
           on_data_loss: DataLossPolicy) -> ResetDecision:
    """`at`: the offset librdkafka could not fetch from (negative: the group committed none); `watermarks`:
    the partition's (log start, log end) now, None when they could not be read (then only a partition with
    nothing committed is decided; the caller asks again later)."""
    start = reset_start(policy)
    if at < 0:   # nothing committed: where auto.offset.reset says, nothing lost
        if start is None:
            return ResetDecision(fail=f"{tp.topic}:{tp.partition} has no committed offset and auto.offset.reset "
                                      f"is {policy!r}: set the stream's offset (set_stream_offset) to start it")
        return ResetDecision(start=start)
    if watermarks is None:
        return ResetDecision()
    log_start, log_end = watermarks
    if at < log_start:
        to = log_start if start in (OFFSET_BEGINNING, None) else log_end
        lost = RecordsLost(topic=tp.topic, partition=tp.partition, from_offset=at, to_offset=max(to, log_start),
                           log_start=log_start)
        if on_data_loss == DataLossPolicy.STOP or start is None:
            why = "on_data_loss is stop" if start is not None else f"auto.offset.reset is {policy!r}"
            return ResetDecision(fail=f"{lost.describe()}; {why}: the stream stopped at offset {at}. Move it on with "
                                      f"set_stream_offset (e.g. to {log_start}, the log start) to accept the loss")
        return ResetDecision(start=lost.to_offset, lost=lost)
    if at <= log_end:   # in range again (a leader moved meanwhile): go on from it
        return ResetDecision(start=at)
    if start is None:
        return ResetDecision(fail=f"{tp.topic}:{tp.partition}: offset {at} is out of range [{log_start}, "
                                  f"{log_end}] and auto.offset.reset is {policy!r}")
    return ResetDecision(start=log_start if start == OFFSET_BEGINNING else log_end)
