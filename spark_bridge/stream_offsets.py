"""The streaming source's offsets and its micro-batch planning, as plain Python (no pyspark, no Kafka).

A Structured Streaming query keeps the source's offsets in its checkpoint and plans micro-batch N+1 from
the end of batch N. Spark's own Kafka source has nothing else, so nobody can move it while it runs. These
offsets carry an EPOCH: an offset change (set_stream_offset, a revert, a realignment to the graph) opens a
new epoch, and the first micro-batch of that epoch reads each moved partition from the change's target
(`origin`) instead of from where the previous batch ended. The query is never restarted; the change takes
effect at the next micro-batch boundary, and nothing from the old position is planned after it.

    {"epoch": 3, "changes": [12], "next": {"orders:0": 120, ...}, "origin": {"orders:0": 100}, "clamped": []}

- `next`: per partition, where this micro-batch ends (exclusive), i.e. where the next one starts;
- `origin`: the partitions whose read in this batch does not begin at the previous batch's `next` (moved by
  the epoch's changes, or new partitions); empty in every later batch of an epoch;
- `changes`: the change ids this epoch applied (several calls between two micro-batches: the last one wins
  per partition, the others are superseded there); `clamped`: moved partitions whose target was outside
  [log start, log end] and was moved into it;
- `stayed` (only when not empty): partitions an ONWARD change (`latest`, `+N`, a time after every record: a
  target computed from the log end or the position when the call was made) found already past its target at
  this boundary: they stay where they stand, as on a host stream (offset_gate: an onward move never goes back);
  the change is answered `applied` there, saying so. An explicit target is kept exact, rewind or not.

`plan_next` is what `latestOffset` computes (admission control: at most `max_rows` offsets per micro-batch,
shared fairly among the partitions); `ranges_between` is what `partitions(start, end)` reads.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from stream_registry.errors import ConfigError
from stream_registry.model import PartitionKey

from .range_plan import OffsetRange


def tp_key(tp: PartitionKey) -> str:
    """`topic:partition` (Kafka topic names hold no colon): the offsets' JSON keys."""
    return f"{tp[0]}:{tp[1]}"


def parse_tp(key: str) -> PartitionKey:
    topic, _, partition = key.rpartition(":")
    if not topic or not partition.isdigit():
        raise ConfigError(f"offsets: expected 'topic:partition', got {key!r}")
    return PartitionKey(topic, int(partition))


def offsets_to_json(offsets: Mapping[PartitionKey, int]) -> dict[str, int]:
    return {tp_key(tp): int(offset) for tp, offset in sorted(offsets.items())}


def offsets_from_json(raw: Mapping[str, object], what: str = "offsets") -> dict[PartitionKey, int]:
    out: dict[PartitionKey, int] = {}
    for key, value in raw.items():
        if type(value) is not int or value < 0:
            raise ConfigError(f"{what}[{key}]: expected an offset >= 0, got {value!r}")
        out[parse_tp(key)] = value
    return out


@dataclass(frozen=True)
class StreamOffset:
    """One end of a micro-batch, as kept in the query's checkpoint (see the module docstring)."""
    epoch: int
    next: Mapping[PartitionKey, int]
    origin: Mapping[PartitionKey, int] = field(default_factory=dict)
    changes: tuple[int, ...] = ()
    clamped: frozenset[PartitionKey] = frozenset()
    stayed: frozenset[PartitionKey] = frozenset()

    def to_json(self) -> dict:
        out = {"epoch": self.epoch, "changes": list(self.changes), "next": offsets_to_json(self.next),
               "origin": offsets_to_json(self.origin), "clamped": sorted(tp_key(tp) for tp in self.clamped)}
        if self.stayed:   # only then: the offsets of checkpoints written before it read back the same
            out["stayed"] = sorted(tp_key(tp) for tp in self.stayed)
        return out

    @classmethod
    def from_json(cls, raw: Mapping) -> StreamOffset:
        try:
            return cls(int(raw["epoch"]), offsets_from_json(raw["next"], "next"),
                       offsets_from_json(raw.get("origin", {}), "origin"),
                       tuple(int(c) for c in raw.get("changes", ())),
                       frozenset(parse_tp(k) for k in raw.get("clamped", ())),
                       frozenset(parse_tp(k) for k in raw.get("stayed", ())))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"offsets: not an mgstreams_kafka stream offset ({exc}): {dict(raw)!r}") from None

    def begins_epoch(self, start: StreamOffset) -> bool:
        """Whether the micro-batch from `start` to this offset is the first of a new epoch."""
        return self.epoch != start.epoch


@dataclass(frozen=True)
class Move:
    """One requested change as the reader applies it: the partitions it moves and where to (change_id None: a
    realignment the reader makes itself, no one's call); `onward`: those whose target is "the end" or "on from
    here" as the call read it, never a move back (see the module docstring)."""
    change_id: int | None
    epoch: int
    targets: Mapping[PartitionKey, int]
    onward: frozenset[PartitionKey] = frozenset()


def plan_next(start: StreamOffset, watermarks: Mapping[PartitionKey, tuple[int, int]],
              moves: Sequence[Move] = (), max_rows: int | None = None) -> StreamOffset:
    """The end of the next micro-batch from `start` (what latestOffset returns; `start` itself: nothing to do).

    `watermarks`: (log start, log end) of every partition the stream reads now; a partition new to it starts
    at its log start. `moves`: the changes not yet applied, oldest first (a later one wins per partition);
    with any, a new epoch begins at the newest change's epoch and each moved partition starts at its target,
    clamped into [log start, log end] - except an onward target the partition already stands past (`start`:
    where this boundary finds it), which stays there (`stayed`). `max_rows`: the most offsets the batch may
    span, shared fairly.
    """
    begin: dict[PartitionKey, int] = {}
    origin: dict[PartitionKey, int] = {}
    clamped: set[PartitionKey] = set()
    stayed: set[PartitionKey] = set()
    stands = dict(start.next)   # where each partition stands at this boundary (a realignment puts it elsewhere)
    for tp, (low, _high) in watermarks.items():
        if tp in start.next:
            begin[tp] = start.next[tp]
        else:
            begin[tp] = origin[tp] = low
    for move in moves:
        for tp, target in move.targets.items():
            if tp not in watermarks:
                continue
            low, high = watermarks[tp]
            placed = min(max(target, low), high)
            clamped.discard(tp)
            stayed.discard(tp)
            if tp in move.onward and stands.get(tp, -1) > placed:
                begin[tp] = stands[tp]      # judged against where it stands, not an earlier call's target
                if begin[tp] == start.next.get(tp):
                    origin.pop(tp, None)
                else:
                    origin[tp] = begin[tp]
                stayed.add(tp)
                continue
            begin[tp] = origin[tp] = placed
            if move.change_id is None:      # the reader's own realignment: the partition stands there now
                stands[tp] = placed
            if placed != target:
                clamped.add(tp)
    available = {tp: max(watermarks[tp][1] - offset, 0) for tp, offset in begin.items()}
    taken = admit(available, max_rows)
    end = {tp: begin[tp] + taken[tp] for tp in begin}
    if moves:
        return StreamOffset(max(m.epoch for m in moves), end, origin,
                            tuple(m.change_id for m in moves if m.change_id is not None), frozenset(clamped),
                            frozenset(stayed))
    if end == dict(start.next) and not origin:
        return start
    return StreamOffset(start.epoch, end, origin)


def admit(available: Mapping[PartitionKey, int], max_rows: int | None) -> dict[PartitionKey, int]:
    """How many offsets of each partition a micro-batch takes: all of them, or at most `max_rows` in total,
    shared by water-filling (a partition with little waiting takes it all, the rest is split evenly)."""
    if max_rows is None or sum(available.values()) <= max_rows:
        return dict(available)
    taken = dict.fromkeys(available, 0)
    left = max_rows
    waiting = sorted((tp for tp in available if available[tp] > 0), key=lambda tp: (available[tp], tp))
    while waiting and left > 0:
        share = max(left // len(waiting), 1)
        tp = waiting.pop(0)
        given = min(available[tp], share, left)
        taken[tp] = given
        left -= given
    return taken


def ranges_between(start: StreamOffset, end: StreamOffset) -> list[OffsetRange]:
    """The offset ranges of the micro-batch from `start` to `end` (what partitions(start, end) reads)."""
    out = []
    for tp, until in sorted(end.next.items()):
        begin = end.origin.get(tp, start.next.get(tp))
        if begin is None:
            raise ConfigError(f"offsets: partition {tp_key(tp)} has no start in {start.to_json()}")
        if until > begin:
            out.append(OffsetRange(tp[0], tp[1], begin, until))
    return out


def group_ranges(ranges: Sequence[OffsetRange], tasks: int | None) -> list[tuple[OffsetRange, ...]]:
    """A micro-batch's ranges as at most `tasks` groups of about equal size (largest first into the smallest
    group), one Spark task each; None or enough tasks: one range per group, in order."""
    if not tasks or len(ranges) <= tasks:
        return [(r,) for r in ranges]
    groups: list[list[OffsetRange]] = [[] for _ in range(tasks)]
    for r in sorted(ranges, key=lambda r: r.size, reverse=True):
        min(groups, key=lambda g: sum(x.size for x in g)).append(r)
    return [tuple(g) for g in groups if g]


def offsets_read(start: object, end: object) -> int | None:
    """How many offsets the micro-batch from `start` to `end` read (a progress report's startOffset/endOffset,
    JSON text or parsed; None when either is missing or not this source's). The query's rows are one stats row
    per range (the tasks write their records themselves), so Spark's numInputRows counts ranges, not records."""
    def parsed(o: object) -> StreamOffset:
        raw = json.loads(o) if isinstance(o, str) else o
        if not isinstance(raw, Mapping):
            raise TypeError(f"not an offset: {raw!r}")
        return StreamOffset.from_json(raw)

    try:
        first, last = parsed(start), parsed(end)
        return sum(r.until_offset - r.from_offset for r in ranges_between(first, last))
    except (ConfigError, TypeError, ValueError, AttributeError):
        return None


def moved_partitions(start: StreamOffset, end: StreamOffset, change_targets: Mapping[int, Iterable[PartitionKey]]
                     ) -> dict[int, dict[PartitionKey, str]]:
    """Per change of a new epoch, per partition it targeted: `applied`, `clamped`, `stayed` (an onward target
    the partition stood past: it stays where it stood), `superseded` (a later change of the same epoch moved
    the partition), or `gone` (not a partition the stream reads any more)."""
    result: dict[int, dict[PartitionKey, str]] = {}
    last: dict[PartitionKey, int] = {}
    for change in end.changes:
        for tp in change_targets.get(change, ()):
            last[tp] = change
    for change in end.changes:
        statuses = {}
        for tp in change_targets.get(change, ()):
            if tp not in end.next:
                statuses[tp] = "gone"
            elif last[tp] != change:
                statuses[tp] = "superseded"
            elif tp in end.stayed:
                statuses[tp] = "stayed"
            else:
                statuses[tp] = "clamped" if tp in end.clamped else "applied"
        result[change] = statuses
    return result
