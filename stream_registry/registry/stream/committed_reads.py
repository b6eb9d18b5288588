"""The group's committed offsets of partitions being assigned, with this stream's change marks (assignment.py reads
them in the rebalance callback, one batched request: where the partitions stand, what a waiting offset change is
judged against). Exactly-once, the marks the sink stores beside its offsets count too: a kill between the sink's
store and the commit left them there only. A mark that is not this stream's is no mark (change_marks)."""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from confluent_kafka import KafkaException, TopicPartition

from ...graph.sinks.protocol import Sink
from ...model import PartitionKey
from .change_marks import ChangeMark, Committed
from .group_commits import GroupCommits
from .poll_context import PollContext

log = logging.getLogger("mgstreams.worker")


def keys_text(keys: Sequence[PartitionKey]) -> str:
    return ", ".join(f"{t}:{p}" for t, p in keys)


def read_committed(ctx: PollContext, commits: GroupCommits, sink: Sink, keys: list[PartitionKey], timeout_s: float
                   ) -> tuple[dict[PartitionKey, Committed] | None, str]:
    """`keys`' committed offsets and marks, and "" (None and why when the group's could not be read)."""
    if not keys:
        return {}, ""
    try:
        found = ctx.consumer().committed([TopicPartition(*tp) for tp in keys], timeout=timeout_s)
    except KafkaException as exc:
        reason = ctx.redact(exc)
        log.warning("stream %s: reading the committed offsets of %s failed: %s", ctx.name, keys_text(keys), reason)
        return None, reason
    out = {}
    for tp in found:
        key = PartitionKey(tp.topic, tp.partition)
        mark = commits.read_mark(key, tp.metadata) if tp.error is None else None   # foreign: None
        answered = tp.error is None
        out[key] = Committed(tp.offset if answered and tp.offset >= 0 else None, mark,
                             nothing=answered and tp.offset < 0)
    if ctx.exactly_once:
        for key, stored in _sink_marks(ctx, commits, sink, keys).items():
            seen = out.get(key, Committed())
            if seen.mark is None or stored.change_id > seen.mark.change_id:
                commits.marks[key] = stored   # carried on by this process's commits
                out[key] = replace(seen, mark=stored)
    return out, ""


def _sink_marks(ctx: PollContext, commits: GroupCommits, sink: Sink, keys: list[PartitionKey]
                ) -> dict[PartitionKey, ChangeMark]:
    """The change marks the exactly-once sink stores beside its offsets, ours only (foreign ones: none). A sink
    that cannot answer now leaves the group's marks alone (as before the sink kept any)."""
    try:
        texts = sink.stored_marks(ctx.name, keys)
    except Exception as exc:
        log.warning("stream %s: reading the change marks stored in the sink for %s failed: %s", ctx.name,
                    keys_text(keys), ctx.redact(exc))
        return {}
    marks = {key: commits.read_stored_mark(key, text) for key, text in texts.items()}
    return {key: mark for key, mark in marks.items() if mark is not None}
