"""The checks: pure functions from what a step returned (and what the sinks hold) to a `Check` with its reason.

None of them talks to a process; tests/test_demo_e2e.py also feeds them wrong data.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from stream_registry import ChangeStatus, OffsetChange, PartitionOffsets, StreamStatus

from .results import BackfillResult, Check, Produced, RaceResult, Record, RewindResult
from .settings import DemoSettings


def check_produced(produced: Produced, settings: DemoSettings) -> Check:
    acked = sum(produced.per_partition.values())
    if acked != settings.events:
        return Check("produce", False, f"{acked} of {settings.events} events acknowledged")
    short = {p: produced.log_end.get(p, 0) for p in range(settings.partitions)
             if produced.log_end.get(p, 0) <= max(settings.live_from, settings.rewind_by)}
    if short:
        return Check("produce", False, f"partitions {sorted(short)} hold too few offsets for this demo ({short})")
    counts = produced.per_partition.values()
    return Check("produce", True, f"{produced.events} events on {len(produced.log_end)} partitions "
                                  f"({min(counts)} to {max(counts)} each)")


def check_race(race: RaceResult) -> Check:
    if race.status_before != StreamStatus.STARTING or race.assigned_before:
        return Check("rebalance race", False,
                     f"status was {race.status_before.value} with {race.assigned_before} partition(s) assigned "
                     f"when set_stream_offset was called: the race was not exercised")
    wrong = [c for c in race.changes if c.status != ChangeStatus.APPLIED or c.offset != race.requested]
    if wrong or len(race.changes) != race.partitions:
        return Check("rebalance race", False, f"{len(race.changes)} change(s) for {race.partitions} partitions, "
                                              f"expected applied at {race.requested}; got {_changes_text(wrong)}")
    return Check("rebalance race", True, f"called while starting (0 of {race.partitions} assigned); applied at "
                                         f"{race.requested} on all {race.partitions} when the group assigned "
                                         f"them, {race.seconds:.2f} s later")


def check_first_delivered(records: Sequence[Record], produced: Produced, requested: int,
                          bolt: bool = False) -> Check:
    """The first offset each partition delivered is exactly the requested one, then every offset to the end.

    Through a Bolt sink delivery order is not observable: the lowest offset in the graph stands in.
    """
    offsets: dict[int, list[int]] = defaultdict(list)
    for r in records:
        offsets[r.partition].append(r.offset)
    problems = []
    for partition, end in sorted(produced.log_end.items()):
        seen = sorted(offsets.get(partition, [])) if bolt else offsets.get(partition, [])
        head = seen[0] if seen else None
        if head != requested:
            problems.append(f"partition {partition}: {'lowest' if bolt else 'first'} offset {head}, "
                            f"expected {requested}")
        elif seen != list(range(requested, end)):
            problems.append(f"partition {partition}: {len(seen)} records, expected offsets "
                            f"{requested}..{end - 1} once each, in order")
    if problems:
        return Check("first delivered", False, "; ".join(problems[:3]))
    where = "lowest offset in the graph" if bolt else "first record delivered"
    return Check("first delivered", True, f"{where} is {requested} on all {len(produced.log_end)} partitions, "
                                          f"then every offset to the end once")


def check_rewind(rewind: RewindResult, records: Sequence[Record], produced: Produced,
                 settings: DemoSettings) -> Check:
    moved = {p: produced.log_end[p] - settings.rewind_by for p in settings.rewind_partitions}
    got = {c.partition: (c.status, c.offset, c.previous_offset) for c in rewind.changes}
    expected = {p: (ChangeStatus.APPLIED, offset, produced.log_end[p]) for p, offset in moved.items()}
    if got != expected:
        return Check("rewind while running", False, f"set_stream_offset returned {_changes_text(rewind.changes)}; "
                                                    f"expected applied at {moved}, from the log end")
    if settings.bolt:
        return Check("rewind while running", None, f"applied at {moved}; redelivery order is not observable "
                                                   f"through a Bolt sink")
    after: dict[int, list[int]] = defaultdict(list)
    for r in records[rewind.records_before:]:
        after[r.partition].append(r.offset)
    wanted = {p: list(range(offset, produced.log_end[p])) for p, offset in moved.items()}
    if dict(after) != wanted:
        shown = {p: f"{o[0]}..{o[-1]} ({len(o)})" for p, o in sorted(after.items())}
        return Check("rewind while running", False, f"after the call: {shown or 'nothing delivered'}; expected "
                                                    f"partitions {sorted(moved)} from {moved} to the end only")
    return Check("rewind while running", True,
                 f"partitions {', '.join(map(str, sorted(moved)))} redelivered from exactly "
                 f"{', '.join(str(moved[p]) for p in sorted(moved))} to the end; the others did not move")


def check_offsets(rows: Sequence[PartitionOffsets], produced: Produced) -> Check:
    bad = [r for r in rows if not r.assigned or r.lag != 0 or r.committed_offset != produced.log_end[r.partition]]
    if bad or len(rows) != len(produced.log_end):
        shown = ", ".join(f"{r.partition}: committed {r.committed_offset} lag {r.lag} assigned {r.assigned}"
                          for r in bad)
        return Check("offsets and lag", False, f"{len(rows)} rows; not caught up: {shown}")
    return Check("offsets and lag", True, f"all {len(rows)} partitions assigned, committed at the log end, lag 0")


def check_history(entries: Sequence[Mapping[str, Any]], changes: Sequence[OffsetChange]) -> Check:
    """The audit holds exactly the applied changes, newest first."""
    got = Counter((e["topic"], e["partition"], e["previous_offset"], e["offset"]) for e in entries)
    wanted = Counter((c.topic, c.partition, c.previous_offset, c.offset) for c in changes
                     if c.status in (ChangeStatus.APPLIED, ChangeStatus.CLAMPED))
    if got != wanted:
        return Check("history", False, f"{len(entries)} audit entries; expected the {sum(wanted.values())} "
                                       f"applied changes; missing {dict(wanted - got)}, extra {dict(got - wanted)}")
    times = [e["changed_at"] for e in entries]
    if times != sorted(times, reverse=True):
        return Check("history", False, "audit entries are not newest first")
    return Check("history", True, f"the {len(entries)} applied changes (the race's and the rewind's), newest first")


def check_backfill_range(result: BackfillResult, produced: Produced, records: Sequence[Record],
                         settings: DemoSettings) -> Check:
    """The backfill wrote exactly [backfill_from, committed) of every partition, each offset once."""
    offsets: dict[int, list[int]] = defaultdict(list)
    for r in records:
        offsets[r.partition].append(r.offset)
    problems = []
    for partition, end in sorted(produced.log_end.items()):
        got = sorted(offsets.get(partition, []))
        if got != list(range(settings.backfill_from, end)):
            span = f"{got[0]}..{got[-1]}" if got else "nothing"
            problems.append(f"partition {partition}: {len(got)} statements ({span}), "
                            f"expected {settings.backfill_from}..{end - 1}")
    if result.report.records != len(records):
        problems.append(f"the report counts {result.report.records} records, the files hold {len(records)}")
    if problems:
        return Check("backfill range", False, "; ".join(problems[:3]))
    return Check("backfill range", True, f"{len(records)} statements: offsets {settings.backfill_from} up to the "
                                         f"committed offset on all {len(produced.log_end)} partitions, once each")


def check_backfill_matches_live(live: Sequence[Record], backfill: Sequence[Record]) -> Check:
    """Over the offsets both wrote, the backfilled statement equals the live one (redeliveries included)."""
    live_by_key: dict[tuple[str, int, int], set[str]] = defaultdict(set)
    for r in live:
        live_by_key[(r.topic, r.partition, r.offset)].add(r.statement)
    backfill_by_key = {(r.topic, r.partition, r.offset): r.statement for r in backfill}
    unstable = [k for k, statements in live_by_key.items() if len(statements) > 1]
    if unstable:
        return Check("backfill equals live", False, f"live redeliveries differ at {_key_text(unstable[0])}")
    overlap = sorted(live_by_key.keys() & backfill_by_key.keys())
    if not overlap:
        return Check("backfill equals live", False, "the backfill and the live stream share no offset")
    differ = [k for k in overlap if backfill_by_key[k] not in live_by_key[k]]
    if differ:
        key = differ[0]
        return Check("backfill equals live", False,
                     f"{len(differ)} of {len(overlap)} overlapping statements differ, first at {_key_text(key)}: "
                     f"live {next(iter(live_by_key[key]))[-90:]!r}, backfill {backfill_by_key[key][-90:]!r}")
    spans: dict[int, list[int]] = defaultdict(list)
    for _, partition, offset in overlap:
        spans[partition].append(offset)
    span = " ".join(f"{p}:[{min(o)},{max(o) + 1})" for p, o in sorted(spans.items()))
    return Check("backfill equals live", True, f"{len(overlap)} overlapping statements identical ({span})")


def _changes_text(changes: Iterable[OffsetChange]) -> str:
    """Per-partition outcomes on one line, partitions with the same outcome together."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for c in changes:
        groups[(c.status.value, c.offset, c.message)].append(c.partition)
    parts = []
    for (status, offset, message), partitions in groups.items():
        why = f" ({message[:90]}{'…' if len(message) > 90 else ''})" if message else ""
        parts.append(f"partition(s) {','.join(map(str, partitions))} {status} at {offset}{why}")
    return "; ".join(parts) or "none"


def _key_text(key: tuple[str, int, int]) -> str:
    return f"{key[0]}:{key[1]}@{key[2]}"
