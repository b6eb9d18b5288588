"""Offset specs: one parser and one resolver for the procedures, the CLI and Spark.

The public surface speaks Memgraph's dialect (`-1` = beginning, `-2` = end, as
`mg.kafka_set_stream_offset`); librdkafka's raw constants are the reverse and
never leak out of this module. Named forms (`earliest`, `latest`) are preferred.

Parsing turns user input into frozen target values; resolving turns a target
plus a partition's offsets into a concrete offset with a status and message,
clamped to [log start, log end] like `kafka-consumer-groups --reset-offsets`.
A target meaning "the end" or "on from here" is marked `onward`: the stream's
offset gate never moves a partition back to it from where it got to meanwhile.

Two forms need the cluster beyond the partition's own offsets, through lookups
the caller hands `resolve`: a datetime or a duration back from now (`"-PT15M"`,
Java Duration's `PnDTnHnMn.nS` as `kafka-consumer-groups --by-duration` takes
it) goes through the time index (`lookup_times`), and `{"group": NAME}` (rpk's
`--to-group`) reads another consumer group's committed offsets (`lookup_group`).
A partition that group never committed keeps its offset (status `unchanged`).
In a map, the key "group" is that form, alone: a topic named `group` is named
by its partitions (`"group:0"`).

Why one module over 400 lines: the parser's targets and the resolver's match over
them are one closed vocabulary, so a new form changes both halves together.
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from .errors import OffsetSpecError
from .model import PartitionKey, PartitionSnapshot, ResolvedOffset

# Memgraph's dialect at the user surface.
MEMGRAPH_BEGINNING = -1
MEMGRAPH_END = -2
# librdkafka's raw constants (also Spark JSON's: -2 earliest, -1 latest).
RD_OFFSET_BEGINNING = -2
RD_OFFSET_END = -1
RD_OFFSET_STORED = -1000
RD_OFFSET_INVALID = -1001
# Kafka offsets and timestamps are int64: a larger number in a spec names nothing.
INT64_MAX = 2 ** 63 - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)


# -- targets ----------------------------------------------------------------
@dataclass(frozen=True)
class Earliest:
    def describe(self) -> str:
        return "earliest"


@dataclass(frozen=True)
class Latest:
    def describe(self) -> str:
        return "latest"


@dataclass(frozen=True)
class Absolute:
    offset: int

    def describe(self) -> str:
        return str(self.offset)


@dataclass(frozen=True)
class AtTime:
    """First offset whose timestamp is at or after `timestamp_ms`."""
    timestamp_ms: int
    text: str

    def describe(self) -> str:
        return self.text


@dataclass(frozen=True)
class BackFromNow:
    """First offset whose timestamp is at or after now minus `nanoseconds` (resolved like AtTime)."""
    nanoseconds: int
    text: str

    def describe(self) -> str:
        return self.text

    def timestamp_ms(self, now_ns: int) -> int:
        """The first whole millisecond at or after now minus the duration (never below 0, as AtTime)."""
        return max(0, -((self.nanoseconds - now_ns) // 1_000_000))


@dataclass(frozen=True)
class GroupOffsets:
    """The committed offset of another consumer group on the same partition."""
    group: str

    def describe(self) -> dict:
        return {"group": self.group}   # the form that reads back: a group id has no string syntax of its own


@dataclass(frozen=True)
class Shift:
    """Move by `delta` from the current position (the committed offset when not running)."""
    delta: int

    def describe(self) -> str:
        return f"{self.delta:+d}"


@dataclass(frozen=True)
class Committed:
    def describe(self) -> str:
        return "committed"


Target = Earliest | Latest | Absolute | AtTime | BackFromNow | Shift | Committed | GroupOffsets


@dataclass(frozen=True)
class OffsetSpec:
    """A parsed spec: a target for all partitions, or targets for some topics/partitions."""
    default: Target | None = None
    topics: Mapping[str, Target] = field(default_factory=dict)
    partitions: Mapping[PartitionKey, Target] = field(default_factory=dict)

    def target_for(self, topic: str, partition: int) -> Target | None:
        """The target of one partition, or None when the spec leaves it alone."""
        key = PartitionKey(topic, partition)
        if key in self.partitions:
            return self.partitions[key]
        if topic in self.topics:
            return self.topics[topic]
        return self.default

    def check_topics(self, topics: Iterable[str]) -> None:
        """Reject topics the spec names but the stream does not read: known without asking the cluster, so a
        spec naming one is refused before any lookup."""
        topics = set(topics)
        for topic in self.topics:
            if topic not in topics:
                raise OffsetSpecError(f"offset: unknown topic {topic!r} (stream topics: {', '.join(sorted(topics))})")
        for topic, partition in self.partitions:
            if topic not in topics:
                raise OffsetSpecError(f"offset: unknown topic {topic!r} in {topic}:{partition} "
                                      f"(stream topics: {', '.join(sorted(topics))})")

    def check_against(self, partitions_by_topic: Mapping[str, Iterable[int]]) -> None:
        """Reject topics or partitions the spec names but the stream does not have."""
        self.check_topics(partitions_by_topic)
        for topic, partition in self.partitions:
            known = sorted(partitions_by_topic[topic])
            if partition not in set(known):
                have = f"{len(known)} partition{'s' if len(known) != 1 else ''}"
                ids = f"{known[0]}-{known[-1]}" if known == list(range(known[0], known[-1] + 1)) and len(known) > 1 \
                    else ", ".join(map(str, known))
                raise OffsetSpecError(f"offset: unknown partition {topic}:{partition} (topic {topic!r} has {have}: "
                                      f"{ids})")


# -- parsing ------------------------------------------------------------------
# ASCII digits only, matched whole (`$` would also match before a trailing newline); a partition
# id is an int32, so ten digits at most.
_SHIFT = re.compile(r"[+-][0-9]+")
_INT = re.compile(r"[0-9]+")
_PARTITION_KEY = re.compile(r"(?P<topic>[A-Za-z0-9._-]+):(?P<partition>[0-9]{1,10})")
_TOPIC_KEY = re.compile(r"[A-Za-z0-9._-]+")
# Java Duration.parse's grammar (what `kafka-consumer-groups --by-duration` reads), without signs inside:
# days, hours, minutes, seconds with up to 9 decimals; at least one part, and one after a `T`.
_DURATION = re.compile(r"(?P<sign>[+-]?)P(?:(?P<days>[0-9]{1,18})D)?(?P<time>T(?:(?P<hours>[0-9]{1,18})H)?"
                       r"(?:(?P<minutes>[0-9]{1,18})M)?(?:(?P<seconds>[0-9]{1,18})(?:[.,](?P<fraction>[0-9]{0,9}))?S)?)?",
                       re.IGNORECASE)
_LOOKS_LIKE_DURATION = re.compile(r"[+-]?P", re.IGNORECASE)
GROUP_KEY = "group"


def parse_offset_spec(value: object) -> OffsetSpec:
    """Parse any accepted spec form; raise OffsetSpecError naming the value otherwise."""
    if isinstance(value, Mapping) and GROUP_KEY not in value:
        return _parse_map(value)
    return OffsetSpec(default=parse_target(value))


def parse_target(value: object, where: str = "offset") -> Target:
    """One partition's target: int (Memgraph dialect), string form, or {"group": NAME}."""
    if isinstance(value, Mapping):
        return _parse_group(value, where)
    if isinstance(value, bool):
        raise OffsetSpecError(f"{where}: expected an integer or a string, got boolean {value!r}")
    if isinstance(value, int):
        return _from_memgraph_int(value, where)
    if isinstance(value, str):
        text = value.strip()
        lowered = text.lower()
        if lowered in ("earliest", "beginning", "smallest"):
            return Earliest()
        if lowered in ("latest", "end", "largest"):
            return Latest()
        if lowered == "committed":
            return Committed()
        if _SHIFT.fullmatch(text):
            return Shift(_bounded_int(text, where))
        if _INT.fullmatch(text):
            return _from_memgraph_int(_bounded_int(text, where), where)
        if _LOOKS_LIKE_DURATION.match(text):
            return _parse_duration(text, value, where)
        timestamp = _parse_datetime(text)
        if timestamp is not None:
            return AtTime(timestamp, text)
        raise OffsetSpecError(
            f"{where}: cannot parse {_shown(value)}; expected an offset >= 0, -1 (beginning), -2 (end), "
            "'earliest', 'latest', 'committed', '+N', '-N', an ISO-8601 datetime, a duration back from now "
            "('-PT15M', '-P1D') or {\"group\": NAME}")
    raise OffsetSpecError(f"{where}: expected an integer, string or map, got "
                          f"{type(value).__name__} {_shown(value)}")


def _bounded_int(text: str, where: str) -> int:
    """The int of a run of ASCII digits (with an optional sign), refused past int64 before converting
    (Python refuses to convert more than 4300 digits at all)."""
    digits = text.lstrip("+-").lstrip("0")
    if len(digits) > len(str(INT64_MAX)) or int(digits or "0") > INT64_MAX:
        raise OffsetSpecError(f"{where}: {_shown_number(text)} is beyond Kafka's offsets (at most {INT64_MAX})")
    return int(text)


def _shown(value: object, limit: int = 100) -> str:
    """A value for a message: its repr cut short (a huge input cannot flood a log), never an error itself."""
    try:
        text = repr(value)
    except Exception:  # e.g. a list holding an int of more than 4300 digits
        return f"<a {type(value).__name__}>"
    return text if len(text) <= limit else f"{text[:limit - 20]}...{text[-10:]} ({len(text)} characters)"


def _shown_number(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:20]}...{text[-10:]} ({len(text)} characters)"


def _shown_int(value: int) -> str:
    """An int for a message: short, and never str() of one Python refuses to print (over 4300 digits)."""
    if value.bit_length() > 10_000:
        return f"a {'negative ' if value < 0 else ''}{value.bit_length()}-bit integer"
    return _shown_number(str(value))


def _from_memgraph_int(value: int, where: str) -> Target:
    if value > INT64_MAX:
        raise OffsetSpecError(f"{where}: {_shown_int(value)} is beyond Kafka's offsets (at most {INT64_MAX})")
    if value >= 0:
        return Absolute(value)
    if value == MEMGRAPH_BEGINNING:
        return Earliest()
    if value == MEMGRAPH_END:
        return Latest()
    back = f'; to move back {-value}, give the string "{value}"' if value.bit_length() <= 64 else ""
    raise OffsetSpecError(f"{where}: invalid offset {_shown_int(value)}; use >= 0, -1 (beginning) or -2 (end)"
                          f"{back}")


def _parse_datetime(text: str) -> int | None:
    """Milliseconds since the epoch of the first record at or after the moment `text` names.

    Exact arithmetic (a float timestamp turns .001 s into 0.9999 ms), rounded up
    (a record at 0 ms is before 0.5 ms), and never below 0: record timestamps are
    not negative, and -1 / -2 are "latest" / "earliest" to a Kafka offsets-by-time query.
    """
    candidate = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    if not re.match(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", candidate):
        return None
    try:
        moment = datetime.fromisoformat(candidate)
    except (ValueError, OverflowError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0, -((_EPOCH - moment) // _MILLISECOND))


def _parse_duration(text: str, value: object, where: str) -> BackFromNow:
    """`-PnDTnHnMn.nS`: a moment that far back from now, resolved at each use (like --by-duration)."""
    match = _DURATION.fullmatch(text)
    parts = ("days", "hours", "minutes", "seconds")
    if match is None or not any(match[p] for p in parts) or (match["time"] and not any(match[p] for p in parts[1:])):
        raise OffsetSpecError(f"{where}: cannot parse {_shown(value)} as a duration; expected -PnDTnHnMn.nS "
                              "(ISO-8601, as kafka-consumer-groups --by-duration), e.g. '-PT15M', '-P1D', "
                              "'-P1DT2H'")
    if match["sign"] != "-":
        raise OffsetSpecError(f"{where}: the duration {_shown(value)} must start with '-' (back from now, e.g. "
                              f"'-{text.lstrip('+')}'); there are no records after now")
    seconds = (int(match["days"] or 0) * 86_400 + int(match["hours"] or 0) * 3_600
               + int(match["minutes"] or 0) * 60 + int(match["seconds"] or 0))
    nanoseconds = seconds * 1_000_000_000 + int((match["fraction"] or "").ljust(9, "0"))
    return BackFromNow(nanoseconds, text)


def _parse_group(value: Mapping, where: str) -> GroupOffsets:
    """{"group": NAME}: another consumer group's committed offsets."""
    if set(value) != {GROUP_KEY}:
        extra = sorted((k for k in value if k != GROUP_KEY), key=str)
        if GROUP_KEY in value:
            raise OffsetSpecError(f"{where}: {{\"group\": ...}} names another consumer group and takes no other key, "
                                  f"got {_shown(extra[0])} too (a topic named 'group' is named by its partitions, "
                                  "'group:0')")
        raise OffsetSpecError(f"{where}: a map here must be {{\"group\": NAME}}, got {_shown(value)}")
    group = value[GROUP_KEY]
    if not isinstance(group, str) or not group.strip() or any(ord(c) < 32 or ord(c) == 127 for c in group):
        raise OffsetSpecError(f"{where}: group: expected a consumer group id (a non-empty string without "
                              f"control characters), got {_shown(group)}")
    return GroupOffsets(group)


def _parse_map(value: Mapping) -> OffsetSpec:
    if not value:
        raise OffsetSpecError("offset: empty map names no topic or partition")
    topics: dict[str, Target] = {}
    partitions: dict[PartitionKey, Target] = {}
    named: dict[PartitionKey, str] = {}
    for key, raw in value.items():
        if not isinstance(key, str):
            raise OffsetSpecError(f"offset: map key {_shown(key)} must be 'topic' or 'topic:partition'")
        where = f"offset[{_shown(key)}]"
        match = _PARTITION_KEY.fullmatch(key)
        if match:
            tp = PartitionKey(match["topic"], int(match["partition"]))
            if tp in partitions:   # "t:1" and "t:01": one partition, two targets
                raise OffsetSpecError(f"offset: map keys {_shown(key)} and {_shown(named[tp])} name the same "
                                      f"partition {tp[0]}:{tp[1]}")
            named[tp] = key
            partitions[tp] = parse_target(raw, where)
        elif _TOPIC_KEY.fullmatch(key):
            topics[key] = parse_target(raw, where)
        else:
            raise OffsetSpecError(f"offset: map key {_shown(key)} must be 'topic' or 'topic:partition'")
    return OffsetSpec(topics=topics, partitions=partitions)


# -- resolving ------------------------------------------------------------------


TimeLookup = Callable[[list[tuple[str, int, int]]], Mapping[PartitionKey, int | None]]
# (group, partitions) -> that group's committed offset per partition, None where it has none (one batched call)
GroupLookup = Callable[[str, list[PartitionKey]], Mapping[PartitionKey, int | None]]


def resolve(spec: OffsetSpec, snapshots: Iterable[PartitionSnapshot], lookup_times: TimeLookup,
            *, running: bool, lookup_group: GroupLookup | None = None,
            now_ns: int | None = None) -> list[ResolvedOffset]:
    """Concrete offsets for every partition the spec targets (partitions it leaves alone are skipped).

    `lookup_times` maps (topic, partition, timestamp_ms) to the first offset at or
    after that time, or None when the partition has none; a duration is taken back
    from `now_ns` (default: the clock, read once for all partitions). `lookup_group`
    reads another group's committed offsets, once per group named, over every
    partition in `snapshots`: a group with no committed offset on any of them is
    unknown, and refused naming it. A partition that fails without a lookup (no
    committed offset, nothing to shift from) fails before any is made: then only
    the failed partitions are returned, and no time or group is looked up.
    """
    snapshots = list(snapshots)
    targeted = [(snap, target) for snap in snapshots
                if (target := spec.target_for(snap.topic, snap.partition)) is not None]
    failed = [r for r in (_resolve_one(snap, target, {}, running, {}) for snap, target in targeted
                          if not isinstance(target, (AtTime, BackFromNow, GroupOffsets))) if r.failed]
    if failed:   # refused as the spec stands: a slow or unreachable cluster's lookups cannot turn it into a 503
        return failed
    if any(isinstance(t, BackFromNow) for _, t in targeted):
        now_ns = time.time_ns() if now_ns is None else now_ns
        targeted = [(s, AtTime(t.timestamp_ms(now_ns), f"{t.text} ({_utc_text(t.timestamp_ms(now_ns))})")
                     if isinstance(t, BackFromNow) else t) for s, t in targeted]
    time_queries = [(s.topic, s.partition, t.timestamp_ms) for s, t in targeted if isinstance(t, AtTime)]
    times = lookup_times(time_queries) if time_queries else {}
    groups = _group_offsets({t.group for _, t in targeted if isinstance(t, GroupOffsets)}, snapshots, lookup_group)
    return [_resolve_one(snap, target, times, running, groups) for snap, target in targeted]


def _utc_text(timestamp_ms: int) -> str:
    return (_EPOCH + timedelta(milliseconds=timestamp_ms)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _group_offsets(groups: set[str], snapshots: list[PartitionSnapshot],
                   lookup_group: GroupLookup | None) -> dict[str, Mapping[PartitionKey, int | None]]:
    if not groups:
        return {}
    if lookup_group is None:
        raise OffsetSpecError(f"offset: {{\"group\": {sorted(groups)[0]!r}}} cannot be resolved here "
                              "(no access to other groups' offsets)")
    tps = [PartitionKey(s.topic, s.partition) for s in snapshots]
    out = {}
    for group in sorted(groups):
        committed = lookup_group(group, tps)
        if not any(committed.get(tp) is not None for tp in tps):
            topics = ", ".join(sorted({t for t, _ in tps}))
            raise OffsetSpecError(f"offset: unknown consumer group {_shown(group)}: it has no committed offset on "
                                  f"any partition of {topics}")
        out[group] = committed
    return out


def _resolve_one(snap: PartitionSnapshot, target: Target, times: Mapping[PartitionKey, int | None], running: bool,
                 groups: Mapping[str, Mapping[PartitionKey, int | None]]) -> ResolvedOffset:
    current = snap.position if running and snap.position is not None else snap.committed
    previous = current
    note = ""
    onward = False   # "the end" or "on from here" as read now: the gate never moves the partition back to it
    match target:
        case Earliest():
            wanted = snap.log_start
        case Latest():
            wanted, onward = snap.log_end, True
        case Absolute(offset=offset):
            wanted = offset
        case Committed():
            if snap.committed is None:
                return _failed(snap, previous, "no committed offset for this partition")
            wanted = snap.committed
        case Shift(delta=delta):
            if current is None:
                source = "position or committed offset" if running else "committed offset"
                return _failed(snap, previous, f"cannot shift by {delta:+d}: no {source} for this partition")
            wanted, onward = current + delta, delta >= 0
        case AtTime(text=text):
            found = times.get(PartitionKey(snap.topic, snap.partition))
            if found is None:
                wanted, onward = snap.log_end, True
                note = f"no record at or after {text}; set to the end ({snap.log_end})"
            else:
                wanted = found
        case GroupOffsets(group=group):
            theirs = groups[group].get(PartitionKey(snap.topic, snap.partition))
            if theirs is None:
                return ResolvedOffset(topic=snap.topic, partition=snap.partition, previous_offset=previous,
                                      offset=previous, clamped=False, unchanged=True,
                                      message=f"group {group!r} has no committed offset for "
                                              f"{snap.topic}:{snap.partition}; it keeps its offset")
            wanted = theirs
        case _:
            raise OffsetSpecError(f"offset: unsupported target {target!r}")
    if wanted < snap.log_start or wanted > snap.log_end:
        bound = snap.log_start if wanted < snap.log_start else snap.log_end
        which = "log start" if wanted < snap.log_start else "log end"
        return ResolvedOffset(topic=snap.topic, partition=snap.partition, previous_offset=previous, offset=bound,
                              clamped=True, message=f"requested {wanted} is outside [{snap.log_start}, "
                                                    f"{snap.log_end}]; clamped to {which} {bound}",
                              onward=onward or wanted > snap.log_end)
    return ResolvedOffset(topic=snap.topic, partition=snap.partition, previous_offset=previous, offset=wanted,
                          clamped=False, message=note, onward=onward)


def _failed(snap: PartitionSnapshot, previous: int | None, why: str) -> ResolvedOffset:
    return ResolvedOffset(topic=snap.topic, partition=snap.partition, previous_offset=previous, offset=None,
                          clamped=False, message=f"{snap.topic}:{snap.partition}: {why}")
