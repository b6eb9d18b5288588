"""Range planning: which offsets of which partitions a backfill reads, as printable data.

Plain Python (no Spark): a start spec and an end spec (the registry's offset
specs, `stream_registry.offset_spec`) are resolved against the cluster through
a `PartitionQuery`, giving one `[from, until)` range per partition; empty ranges
are dropped and big ranges are cut so the plan has at least `min_partitions`
pieces. Each piece becomes one Spark input partition.

The end is exclusive. `until=committed` ends every range at the consumer
group's committed offset, or, given `resume_offsets` (a registered stream's
resume point, `stream_registry.resume_point`), at the offset where the live
stream resumes: a backfill up to there plus the live stream cover every offset
once (the hand-off).
"""
from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise

from stream_registry.errors import KafkaOperationError, OffsetSpecError
from stream_registry.kafka.queries import PartitionQuery
from stream_registry.model import PartitionKey, PartitionSnapshot, ResolvedOffset
from stream_registry.offset_spec import Absolute, Committed, Earliest, Latest, OffsetSpec, Target, resolve

# What a partition the spec does not name gets (the JVM Kafka source's batch defaults).
DEFAULT_START: Target = Earliest()
DEFAULT_UNTIL: Target = Latest()


class DataLossError(KafkaOperationError):
    """Offsets a range needs are no longer in the log (retention or compaction deleted them)."""


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets [from_offset, until_offset) of one partition; the unit of one Spark task."""
    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        """Offsets spanned (an upper bound on records: gaps hold markers and aborted records)."""
        return max(0, self.until_offset - self.from_offset)

    @property
    def name(self) -> str:
        """A stable file-name stem: `<topic>-<partition>-<from>-<until>`."""
        return f"{self.topic}-{self.partition}-{self.from_offset}-{self.until_offset}"

    def __str__(self) -> str:
        return f"{self.topic}:{self.partition} [{self.from_offset}, {self.until_offset})"

    def to_dict(self) -> dict:
        return {"topic": self.topic, "partition": self.partition,
                "from_offset": self.from_offset, "until_offset": self.until_offset}

    @classmethod
    def from_dict(cls, value: Mapping) -> OffsetRange:
        try:
            topic, partition = value["topic"], value["partition"]
            start, until = value["from_offset"], value["until_offset"]
        except (KeyError, TypeError):
            raise OffsetSpecError(f"offset range: expected topic, partition, from_offset, until_offset; "
                                  f"got {value!r}") from None
        if not isinstance(topic, str) or not all(type(v) is int for v in (partition, start, until)):
            raise OffsetSpecError(f"offset range: bad field types in {value!r}")
        if partition < 0 or start < 0 or until < start:
            raise OffsetSpecError(f"offset range: need partition >= 0 and 0 <= from <= until, got {value!r}")
        return cls(topic, partition, start, until)


def ranges_to_json(ranges: Iterable[OffsetRange]) -> str:
    return json.dumps([r.to_dict() for r in ranges], separators=(",", ":"))


def ranges_from_json(text: str) -> list[OffsetRange]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise OffsetSpecError(f"offset ranges: not JSON ({exc})") from None
    if not isinstance(value, list):
        raise OffsetSpecError("offset ranges: expected a JSON list of ranges")
    return [OffsetRange.from_dict(item) for item in value]


@dataclass(frozen=True)
class PartitionBounds:
    """One partition's resolved range before splitting, with what the resolver had to say."""
    topic: str
    partition: int
    from_offset: int
    until_offset: int
    log_start: int
    log_end: int
    note: str = ""

    @property
    def range(self) -> OffsetRange:
        return OffsetRange(self.topic, self.partition, self.from_offset, max(self.from_offset, self.until_offset))


@dataclass(frozen=True)
class RangePlan:
    """Resolved bounds per partition and the ranges to read (non-empty, split)."""
    bounds: tuple[PartitionBounds, ...]
    ranges: tuple[OffsetRange, ...]

    @property
    def total_offsets(self) -> int:
        return sum(r.size for r in self.ranges)

    @property
    def notes(self) -> list[str]:
        return [f"{b.topic}:{b.partition}: {b.note}" for b in self.bounds if b.note]

    def __str__(self) -> str:
        lines = [f"{len(self.ranges)} range(s), {self.total_offsets} offset(s)"]
        lines += [f"  {r}  ({r.size} offsets)" for r in self.ranges]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


# -- resolving ------------------------------------------------------------------
def resolve_bounds(query: PartitionQuery, topics: Iterable[str] | Mapping[str, Iterable[int]],
                   start: OffsetSpec, until: OffsetSpec, *, fail_on_data_loss: bool = True,
                   resume_offsets: Mapping[PartitionKey, int] | None = None) -> list[PartitionBounds]:
    """Resolve start and end specs for every partition of `topics` (or only the listed partitions).

    `resume_offsets`, when given, is what `committed` means for every partition
    (in `committed` targets and relative shifts alike) instead of the group's
    committed offsets in Kafka; it must cover every partition planned.
    Partitions a spec does not name start at earliest and end at latest. A start
    that names deleted offsets (an absolute offset or the committed offset below
    the log start) raises DataLossError unless `fail_on_data_loss` is false, in
    which case it is clamped to the log start like any other out-of-range offset.
    A start past the end gives an empty range (dropped, with a note).
    """
    partitions = _partitions(query, topics)
    start.check_against(partitions)
    until.check_against(partitions)
    tps = [PartitionKey(t, p) for t in sorted(partitions) for p in sorted(partitions[t])]
    snapshots = query.snapshots(tps)
    if resume_offsets is not None:
        snapshots = _with_resume_offsets(snapshots, resume_offsets)
    starts = _resolve_all(query, _with_default(start, DEFAULT_START), snapshots, "start")
    ends = _resolve_all(query, _with_default(until, DEFAULT_UNTIL), snapshots, "until")
    bounds = []
    for snap in snapshots:
        key = PartitionKey(snap.topic, snap.partition)
        first, last = starts[key], ends[key]
        _check_data_loss(start, snap, fail_on_data_loss)
        notes = [f"{which}: {r.message}" for which, r in (("start", first), ("until", last)) if r.message]
        from_offset, until_offset = _offset(first), _offset(last)
        if from_offset > until_offset:
            notes.append(f"start {from_offset} is after the end {until_offset}: nothing to read")
        bounds.append(PartitionBounds(snap.topic, snap.partition, from_offset, until_offset,
                                      snap.log_start, snap.log_end, "; ".join(notes)))
    return bounds


def _with_resume_offsets(snapshots: Sequence[PartitionSnapshot],
                         resume_offsets: Mapping[PartitionKey, int]) -> list[PartitionSnapshot]:
    missing = [f"{s.topic}:{s.partition}" for s in snapshots if (s.topic, s.partition) not in resume_offsets]
    if missing:
        raise OffsetSpecError(f"resume_offsets: no resume offset for partition(s) {', '.join(missing)}")
    for key, offset in resume_offsets.items():
        if type(offset) is not int or offset < 0:
            raise OffsetSpecError(f"resume_offsets: {key[0]}:{key[1]}: expected an offset >= 0, got {offset!r}")
    return [replace(s, committed=resume_offsets[PartitionKey(s.topic, s.partition)]) for s in snapshots]


def _partitions(query: PartitionQuery, topics) -> dict[str, list[int]]:
    if isinstance(topics, Mapping):
        known = query.partitions(list(topics))
        chosen = {}
        for topic, wanted in topics.items():
            wanted = sorted(set(wanted))
            missing = [p for p in wanted if p not in known[topic]]
            if missing:
                raise OffsetSpecError(f"assign: topic {topic!r} has no partition(s) {missing} "
                                      f"(it has {known[topic]})")
            chosen[topic] = wanted
        return chosen
    topics = list(dict.fromkeys(topics))
    if not topics:
        raise OffsetSpecError("topics: no topic given")
    return query.partitions(topics)


def _with_default(spec: OffsetSpec, default: Target) -> OffsetSpec:
    return spec if spec.default is not None else OffsetSpec(default, spec.topics, spec.partitions)


def _resolve_all(query: PartitionQuery, spec: OffsetSpec, snapshots: Sequence[PartitionSnapshot],
                 which: str) -> dict[PartitionKey, ResolvedOffset]:
    resolved = resolve(spec, snapshots, query.offsets_for_times, running=False, lookup_group=query.group_committed)
    failed = [r.message for r in resolved if r.failed or r.unchanged]   # a range needs an offset at both ends
    if failed:
        raise OffsetSpecError(f"{which}: " + "; ".join(failed))
    return {PartitionKey(r.topic, r.partition): r for r in resolved}


def _offset(resolved: ResolvedOffset) -> int:
    """A resolved end of a range (_resolve_all refused any partition without one)."""
    if resolved.offset is None:
        raise OffsetSpecError(f"{resolved.topic}:{resolved.partition}: {resolved.message}")
    return resolved.offset


def _check_data_loss(start: OffsetSpec, snap: PartitionSnapshot, fail_on_data_loss: bool) -> None:
    target = _with_default(start, DEFAULT_START).target_for(snap.topic, snap.partition)
    wanted = target.offset if isinstance(target, Absolute) else \
        snap.committed if isinstance(target, Committed) else None
    if fail_on_data_loss and wanted is not None and wanted < snap.log_start:
        raise DataLossError(
            f"start: offsets [{wanted}, {snap.log_start}) of {snap.topic}:{snap.partition} were deleted "
            f"(log start is {snap.log_start}); set failOnDataLoss=false (--no-fail-on-data-loss) to start "
            f"at the earliest available offset", code="OFFSET_OUT_OF_RANGE",
            topic=snap.topic, partition=snap.partition)


# -- splitting ------------------------------------------------------------------
def split_ranges(ranges: Iterable[OffsetRange], min_partitions: int | None = None,
                 max_offsets_per_partition: int | None = None) -> list[OffsetRange]:
    """Drop empty ranges, then cut big ones so there are at least `min_partitions` pieces.

    Like Spark's KafkaOffsetRangeCalculator, nothing is cut when the ranges
    already number `min_partitions`, and the cuts go to ranges in proportion to
    their size so small partitions stay whole. Here each extra piece goes, one at
    a time, to the range whose pieces are currently the largest (highest-averages
    apportionment), so the plan reaches `min_partitions` exactly whenever there
    are enough offsets, with near-equal pieces inside a range.
    `max_offsets_per_partition` (the JVM source's maxRecordsPerPartition) then
    cuts any piece still larger than that.
    """
    ranges = sorted(r for r in ranges if r.size > 0)
    _check_positive("minPartitions", min_partitions)
    _check_positive("maxRecordsPerPartition", max_offsets_per_partition)
    parts = [1] * len(ranges)
    if min_partitions and len(ranges) < min_partitions:
        # max-heap on the current piece size of each range
        heap: list[tuple[float, int]] = [(-r.size, i) for i, r in enumerate(ranges)]
        heapq.heapify(heap)
        for _ in range(min_partitions - len(ranges)):
            while heap and parts[heap[0][1]] >= ranges[heap[0][1]].size:
                heapq.heappop(heap)  # a range of n offsets makes at most n pieces
            if not heap:
                break
            _, i = heapq.heappop(heap)
            parts[i] += 1
            heapq.heappush(heap, (-ranges[i].size / parts[i], i))
    pieces = [piece for r, n in zip(ranges, parts, strict=True) for piece in _cut(r, n)]
    if max_offsets_per_partition:
        pieces = [piece for r in pieces for piece in _cut(r, -(-r.size // max_offsets_per_partition))]
    return pieces


def _cut(r: OffsetRange, parts: int) -> list[OffsetRange]:
    if parts <= 1:
        return [r]
    edges = [r.from_offset + (i * r.size) // parts for i in range(parts + 1)]
    return [OffsetRange(r.topic, r.partition, a, b) for a, b in pairwise(edges) if b > a]


def _check_positive(option: str, value: int | None) -> None:
    if value is not None and (type(value) is not int or value < 1):
        raise OffsetSpecError(f"{option}: expected a positive integer, got {value!r}")


# -- the whole plan -------------------------------------------------------------
def plan(query: PartitionQuery, topics: Iterable[str] | Mapping[str, Iterable[int]], start: OffsetSpec,
         until: OffsetSpec, min_partitions: int | None = None, *, max_offsets_per_partition: int | None = None,
         fail_on_data_loss: bool = True, resume_offsets: Mapping[PartitionKey, int] | None = None) -> RangePlan:
    bounds = resolve_bounds(query, topics, start, until, fail_on_data_loss=fail_on_data_loss,
                            resume_offsets=resume_offsets)
    ranges = split_ranges([b.range for b in bounds], min_partitions, max_offsets_per_partition)
    return RangePlan(tuple(bounds), tuple(ranges))


def plan_ranges(query: PartitionQuery, topics: Iterable[str] | Mapping[str, Iterable[int]], start_spec: OffsetSpec,
                until_spec: OffsetSpec, min_partitions: int | None = None, **kwargs) -> list[OffsetRange]:
    """The ranges to read: see `plan` (which also keeps the per-partition bounds and notes)."""
    return list(plan(query, topics, start_spec, until_spec, min_partitions, **kwargs).ranges)
