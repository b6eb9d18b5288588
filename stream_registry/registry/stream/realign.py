"""No silent rewinds: an exactly-once stream that resumes elsewhere than where it stood says so.

Two places where the sink's stored offsets, the truth, decide against what the
stream had: a partition just assigned resumes where its sink stores (or at the
log start where it stores nothing) while its group committed elsewhere; and a
running batch's compare-and-set finds offsets someone else moved (a file cut
back, truncated, replaced or rotated; offsets edited or deleted in the graph).
Both become `Realignment`s (resume_point.realignments: from where, to where,
why), logged by the stream and sent to the host, which records them in the
history (ChangeStatus.REALIGNED) where the lag verdict sees them as REWIND.

Called on the worker's poll thread, between batches (never inside a rebalance
callback): it asks the group's committed offsets and, for a partition the sink
stores nothing of, its log start.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from ...errors import StoredOffsetsConflict
from ...model import PartitionKey, Realignment
from ...resume_point import assignment_reason, conflict_reason, realignments
from .poll_context import PollContext

log = logging.getLogger("mgstreams.worker")

KAFKA_TIMEOUT_S = 5.0   # the group's committed offsets, a log start: asked between batches


def note_resume(ctx: PollContext, keys: list[PartitionKey], stored: Mapping[PartitionKey, int],
                resumed: dict[PartitionKey, tuple[int | None, int]]) -> None:
    """In the rebalance callback, before anything of `keys` is committed: the just-assigned partitions that resume
    where the sink stores (`stored`; absent: nothing, the log start) while their group committed elsewhere go to
    `resumed` as (stored, committed), explained between batches (explain_resume). One waiting for an
    offset change is the change's, recorded as such."""
    waiting = ctx.gate.waiting()
    todo = [tp for tp in keys if tp not in waiting]
    if not todo:
        return
    try:
        found = ctx.consumer().committed([TopicPartition(t, p) for t, p in todo], timeout=KAFKA_TIMEOUT_S)
    except KafkaException as exc:
        log.warning("stream %s: cannot read the group's committed offsets to compare them with the sink's: %s",
                    ctx.name, ctx.redact(exc))
        return
    for tp in found:
        key = PartitionKey(tp.topic, tp.partition)
        if tp.error is None and tp.offset >= 0 and stored.get(key) != tp.offset:
            resumed[key] = (stored.get(key), tp.offset)


def explain_resume(ctx: PollContext, resumed: dict[PartitionKey, tuple[int | None, int]]) -> None:
    """Before the next batch is written (the worker calls it with each batch, follow_sink between batches): the
    partitions note_resume found resuming elsewhere than their group's commit are realignments, reported (log,
    history) and taken out of `resumed`. A stream process waits until the host recorded them (stream_process.py):
    a kill right after the first batch from where the sink resumed must not leave the history without the move."""
    if not resumed:
        return
    resumed = {tp: resumed.pop(tp) for tp in list(resumed)}
    consumer = ctx.consumer()
    starts = {tp: stored if stored is not None else _log_start(consumer, tp) for tp, (stored, _) in resumed.items()}
    moves = realignments({tp: committed for tp, (_, committed) in resumed.items()},
                         {tp: o for tp, o in starts.items() if o is not None},
                         lambda tp, was, offset: assignment_reason(resumed[tp][0], was, offset))
    _report(ctx, moves)


def explain_conflict(ctx: PollContext, conflict: StoredOffsetsConflict, starts: Mapping[PartitionKey, int]) -> None:
    """A batch's compare-and-set found other offsets than the worker expected; it goes on from `starts` (the
    sink's, or librdkafka's beginning where the sink stores none)."""
    expected = {PartitionKey(*tp): o for tp, o in conflict.expected.items()}
    consumer = ctx.consumer()
    resumes = {tp: o if o >= 0 else _log_start(consumer, tp) for tp, o in starts.items()}
    moves = realignments(expected, {tp: o for tp, o in resumes.items() if o is not None},
                         lambda tp, was, offset: conflict_reason(ctx.redact(conflict)))
    _report(ctx, moves)


def _report(ctx: PollContext, moves: list[Realignment]) -> None:
    if not moves:
        return
    log.warning("stream %s: realigned to the sink: %s", ctx.name,
                "; ".join(f"{m.topic}:{m.partition} {m.previous_offset} -> {m.offset}: {m.reason}" for m in moves))
    ctx.events.on_realign(moves)


def _log_start(consumer: Any, tp: PartitionKey) -> int | None:
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(*tp), timeout=KAFKA_TIMEOUT_S, cached=False)
    except KafkaException:
        return None
    return low if low >= 0 else None
