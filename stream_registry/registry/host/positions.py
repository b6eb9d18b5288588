"""Where a stream's partitions stand, and where an offset spec would move them.

The cluster's snapshots (watermarks, committed offsets) joined with what the
stream's worker last saw (positions, an exactly-once sink's stored offsets),
its pending changes and, for a stopped exactly-once stream, the offsets its sink
stores: `describe` rows and resolved specs. The registry calls these with no
lock held (they ask the cluster and the sink), then takes its stream's lock to
act on the result.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from ...config import Delivery, StreamConfig
from ...errors import OffsetSpecError, StreamError
from ...graph.sinks.policy import OutputPolicy
from ...graph.sinks.stored_offsets import read_stored_offsets
from ...kafka.queries import PartitionQuery
from ...meanwhile import finished_with, meanwhile
from ...model import PartitionKey, PartitionOffsets, PartitionSnapshot, ResolvedOffset, WorkerSnapshot
from ...offset_spec import OffsetSpec, resolve
from ...redaction import redact
from ...resume_point import resume_offsets
from ..runners.engine import StreamRunner

log = logging.getLogger("mgstreams.registry")


def _while_seen(runner: StreamRunner | None, cluster: Callable[[], list[PartitionSnapshot]]
                ) -> tuple[list[PartitionSnapshot], WorkerSnapshot]:
    """`cluster()`'s snapshots (questions to Kafka), their positions what the stream's processes see, asked
    meanwhile (a pipe round trip each): the two at once, not one after the other, as offset calls wait for both."""
    if runner is None:
        return cluster(), WorkerSnapshot()
    asked = meanwhile(runner.snapshot)
    snapshots = finished_with(asked, cluster)
    seen = asked.result()
    return [replace(s, position=seen.positions.get(PartitionKey(s.topic, s.partition))) for s in snapshots], seen


class StreamPositions:
    """Reads a stream's partitions' positions; `pending` gives a stream's pending offsets (the state store's),
    `output` the file sinks' output policy (to read an exactly-once sink's stored offsets)."""

    def __init__(self, pending: Callable[[str], Mapping[PartitionKey, int]], output: Callable[[], OutputPolicy]):
        self._pending = pending
        self._output = output

    def resolve(self, config: StreamConfig, query: PartitionQuery, runner: StreamRunner | None, spec: OffsetSpec,
                shown: str, deadline: float) -> tuple[list[ResolvedOffset], dict[PartitionKey, PartitionSnapshot]]:
        """Every partition the spec targets, resolved against the cluster now, and the snapshots of the
        stream's partitions; OffsetSpecError naming `shown` when any cannot be resolved. Relative specs and
        previous offsets count from where the stream is: its position where its consumer holds the partition,
        else its resume point (a pending change; an exactly-once sink's stored offset)."""
        spec.check_topics(config.topics)   # before any question to the cluster: a bad spec is a 400 however slow

        def left() -> float:
            return max(deadline - time.monotonic(), 0.1)

        def cluster() -> list[PartitionSnapshot]:
            partitions = query.partitions(config.topics, left())
            spec.check_against(partitions)
            return query.snapshots([PartitionKey(t, p) for t in config.topics for p in partitions[t]],
                                   deadline=deadline)
        snapshots, seen = _while_seen(runner, cluster)
        where = self._where(config, snapshots, seen)
        based = [PartitionSnapshot(topic=s.topic, partition=s.partition, log_start=s.log_start, log_end=s.log_end,
                                   committed=s.committed, position=where.get(PartitionKey(s.topic, s.partition)))
                 for s in snapshots]
        resolved = resolve(spec, based, lambda times: query.offsets_for_times(times, time.monotonic() + left()),
                           running=True,
                           lookup_group=lambda group, tps: query.group_committed(group, tps, left()))
        unresolved = [r for r in resolved if r.failed]
        if unresolved:
            raise OffsetSpecError(f"{shown}: " + grouped_reasons(unresolved))
        return resolved, {PartitionKey(snap.topic, snap.partition): snap for snap in snapshots}

    def _where(self, config: StreamConfig, snapshots: list[PartitionSnapshot],
               seen: WorkerSnapshot) -> dict[PartitionKey, int | None]:
        """Where each partition stands: the consumer's position, else the resume point without the
        auto.offset.reset guess (None: the partition has no offset yet)."""
        stored: dict[PartitionKey, int] | None = {}
        if config.delivery == Delivery.EXACTLY_ONCE:
            missing = [PartitionKey(s.topic, s.partition) for s in snapshots
                       if (s.topic, s.partition) not in seen.stored]
            offline = self.stored_offsets(config, missing) if missing else {}
            stored = None if offline is None else {**offline, **seen.stored}
        resume = resume_offsets(config, snapshots, self._pending(config.name), stored, guess=False)
        return {tp: seen.positions.get(tp, resume[tp]) for tp in resume}

    def describe(self, config: StreamConfig, query: PartitionQuery,
                 runner: StreamRunner | None) -> list[PartitionOffsets]:
        """Per partition: committed, position, log start/end, lag, held by this stream's consumer, the
        offset its sink stores (exactly-once) and where it would resume if started now (`resume_point`)."""
        def cluster() -> list[PartitionSnapshot]:
            partitions = query.partitions(config.topics)
            return query.snapshots([PartitionKey(t, p) for t in config.topics for p in partitions[t]])
        snapshots, seen = _while_seen(runner, cluster)
        tps = [PartitionKey(s.topic, s.partition) for s in snapshots]
        missing = [tp for tp in tps if tp not in seen.stored]   # not assigned since its process started
        offline = self.stored_offsets(config, missing) if missing else {}
        stored = None if offline is None else {**offline, **seen.stored}   # None: the sink cannot be read
        resume = resume_offsets(config, snapshots, self._pending(config.name), stored)
        return [PartitionOffsets(topic=s.topic, partition=s.partition, committed_offset=s.committed,
                                 position=s.position, log_start_offset=s.log_start, log_end_offset=s.log_end,
                                 lag=None if s.committed is None else max(s.log_end - s.committed, 0),
                                 assigned=(s.topic, s.partition) in seen.assigned,
                                 stored_offset=stored.get(key) if stored else None,
                                 resume_offset=resume[key],
                                 task=seen.holders.get(key, 0 if key in seen.assigned and not seen.holders
                                                       else None))
                for s in snapshots for key in [PartitionKey(s.topic, s.partition)]]

    def resume_starts(self, config: StreamConfig, query: PartitionQuery, runner: StreamRunner | None
                      ) -> tuple[dict[PartitionKey, int], dict[PartitionKey, int]]:
        """(start, log end) of every partition from where the stream resumes (`describe`'s resume_offset);
        OffsetSpecError when an exactly-once stream's sink cannot be read, naming it."""
        rows = self.describe(config, query, runner)
        unknown = [f"{r.topic}:{r.partition}" for r in rows if r.resume_offset is None]
        if unknown:
            raise OffsetSpecError(f"offset 'committed': where the stream resumes on {', '.join(unknown)} is the "
                                  "offset its exactly-once sink stores, and the sink cannot be read now")
        starts = {PartitionKey(r.topic, r.partition): r.resume_offset for r in rows if r.resume_offset is not None}
        return starts, {PartitionKey(r.topic, r.partition): r.log_end_offset for r in rows}

    def stored_offsets(self, config: StreamConfig,
                       partitions: Iterable[PartitionKey]) -> dict[PartitionKey, int] | None:
        """An exactly-once stream's offsets read from its sink; None when the sink cannot be read."""
        if config.delivery != Delivery.EXACTLY_ONCE:
            return {}
        try:
            config.validate()   # the sink's host is one the operator allows today
            found = read_stored_offsets(config.sink, config.name, config.sink_credentials(), self._output(),
                                        list(partitions))
        except StreamError as exc:
            log.warning("stream %s: %s", config.name, redact(str(exc), config.secret_values()))
            return None
        return {PartitionKey(*tp): offset for tp, offset in found.items()}


def grouped_reasons(resolved: Iterable[ResolvedOffset]) -> str:
    """`t:0..199 (200 partitions): reason` instead of 200 lines saying the same thing."""
    by_reason: dict[str, list[PartitionKey]] = {}
    for r in resolved:
        prefix = f"{r.topic}:{r.partition}: "
        reason = r.message[len(prefix):] if r.message.startswith(prefix) else r.message
        by_reason.setdefault(reason, []).append(PartitionKey(r.topic, r.partition))
    parts = []
    for reason, tps in by_reason.items():
        topics = sorted({t for t, _ in tps})
        where = ", ".join(
            f"{t}:{min(ps)}..{max(ps)} ({len(ps)} partitions)" if len(ps) > 2 else ", ".join(f"{t}:{p}" for p in ps)
            for t in topics for ps in [sorted(p for tt, p in tps if tt == t)])
        parts.append(f"{where}: {reason}")
    return "; ".join(parts)
