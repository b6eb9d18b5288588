"""The soak's oracle: pure functions over what a sink holds, judged against at-least-once.

`read_sink` parses a cypherl sink file the soak's transformation wrote into
records per partition (graph.graph_records the same from what the FalkorDB
graph holds: the tasks stream's sink); `check_partition` judges one partition's records
against the offset changes the stream may have applied (see its docstring for
the continuations, the expected set and what counts as lost, stale, duplicated
or replayed). tests/test_soak.py feeds it hand-made histories.
"""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from stream_registry.graph.cypherl_frames import FRAME_PREFIX
from stream_registry.graph.offset_store import MARK_LABEL, OFFSET_LABEL

OFFSET_LINE_PREFIX = f"MERGE (o:{OFFSET_LABEL} ".encode()   # an exactly-once batch's stored offsets
MARK_LINE_PREFIX = f"MERGE (m:{MARK_LABEL} ".encode()       # an offset change's stored change mark

_LINE = re.compile(rb'CREATE \(:SoakMsg \{topic: "(?P<topic>[A-Za-z0-9._-]+)", partition: (?P<partition>\d+), '
                   rb'offset: (?P<offset>\d+), seq: (?P<seq>-?\d+), batch: "(?P<batch>[0-9-]+)"\}\);')


@dataclass(frozen=True)
class Rec:
    """One statement of a sink file: the message it records and where in the file it starts."""
    offset: int
    seq: int
    batch: str
    pos: int


@dataclass(frozen=True)
class Change:
    """An offset change of one partition that the stream may have applied.

    `lo`: the sink file's size when the call started (the change cannot act on
    anything written before). `hi`: a size by which it had surely been applied
    (the call returned `applied`/`clamped`, or the host's history showed it), or
    None when that is unknown (returned `pending` and never seen applied; a
    pending move whose commit failed may still have moved the stream).
    `claim`: the stream's position or committed offset that the call reported as
    `previous_offset` when it resolved this change, kept only when the change
    before it was surely applied before this call started: then every offset
    below it was written before (or the stream would have committed or
    reported a position past a record it never wrote).
    `previous`: where the stream stood when the change was applied (an applied
    answer's or the history's previous offset), None when unknown. A backward
    change from there starts only once the old continuation got there: a record
    at its offset written before (by the batch in flight when the call came) is
    the old continuation's, and the move's re-reading of it a replay.
    """
    offset: int
    lo: int
    hi: int | None = None
    claim: int | None = None
    previous: int | None = None


@dataclass(frozen=True)
class Foreign:
    """A foreign member's stay on one partition (a plain consumer in the stream's group that commits).

    `lo`/`hi`: the stream's sink size when it joined and after it left; `taken`: the offsets it consumed
    and then committed past (the group moved on without the stream: at-least-once owes the stream nothing
    for them); `commits`: the offsets it committed (points the stream may resume from).
    """
    lo: int
    hi: int
    taken: frozenset[int]
    commits: frozenset[int]


@dataclass
class Verdict:
    records: int = 0
    lost: int = 0            # expected offsets never delivered anywhere
    skipped: int = 0         # expected in a continuation, missing there, delivered only in another
    stale: int = 0           # delivered outside the continuation
    duplicates: int = 0      # re-delivered within a continuation, from a commit point (uncommitted batches)
    replayed: int = 0        # delivered again because a change moved the stream back
    mismatched: int = 0      # the payload's seq is not what the producer wrote at that offset
    foreign: int = 0         # expected, not delivered by the stream, consumed and committed by a foreign member
    problems: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.problems) < 12:
            self.problems.append(text)

    def add(self, other: Verdict) -> None:
        for name in ("records", "lost", "skipped", "stale", "duplicates", "replayed", "mismatched", "foreign"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def check_partition(records: list[Rec], changes: list[Change], log_end: int,
                    seqs: dict[int, int] | None = None, where: str = "",
                    foreign: tuple[Foreign, ...] | list[Foreign] = ()) -> Verdict:
    """Check one partition's deliveries (its records in sink file order) against at-least-once.

    Continuations. The stream's deliveries form continuations: the first starts
    at offset 0 (a new group, auto.offset.reset=earliest); each applied offset
    change starts a new one at its offset. A record belongs to the continuation
    of the last change applied before it was written. Which one that is comes
    from the file order and the changes' windows: a record that starts at or
    past a change's `hi` comes after that change; a record at or past `lo`
    whose offset is the change's offset is taken as the first record of that
    change's continuation (the earliest such change; a chain of changes to the
    same offset is taken together). The worker applies changes between batches
    and commits a change before the call returns, so in a correct stream the
    first record after a change is its offset.

    What a correct at-least-once stream must deliver (the expected set). In
    each continuation that starts at offset o: every offset of [o, end), where
    end is the highest offset delivered in it plus one, for the last
    continuation the partition's log end at the finish, and for a continuation
    a later change resolved against, at least that change's `claim` (the
    position or committed offset the stream reported: it writes before it
    commits, so everything below was written). Offsets a forward change jumped
    over - from the position the stream had reached to the new offset - are
    skipped on purpose and not expected; offsets a backward change re-reads are
    expected again in the new continuation.
      lost    = expected offsets (per continuation) never delivered anywhere;
      skipped = expected in a continuation, missing from it, but delivered in
                another (a continuation that did not start exactly at its offset
                or has a hole): a violation as well, reported with lost.

    Stale: a record of a continuation below its start offset (for a change that
    returned `applied`, any such record written after the call returned is
    stale: nothing from the old position may follow); and a re-delivery that
    does not start at a commit point. A stream re-reads only from its committed
    offset (after a restart, a rebalance, a failed batch): the committed offset
    is the change's offset or the end of a batch written in the continuation.
    Batches are visible in the file (each record names its batch), so every run
    of re-delivered records must start at such a point; a run that does not is
    stale, record by record.

    Foreign members (`foreign`): a plain consumer of the stream's group that
    held the partition for a while, consumed some offsets and committed past
    them. Those offsets are owed by nobody any more in the continuation that
    was current while it held the partition (its window `lo`..`hi` of the sink
    file overlaps the continuation's span in the file, from its first record
    to the next continuation's first record): missing from the stream there,
    they count as `foreign`, not lost. Everywhere else (a continuation a
    change started after it left) they are owed as usual. Its commits are
    commit points the stream may resume from.

    Duplicates: records re-delivered within a continuation from a commit point,
    i.e. batches written but not (yet) committed when the stream restarted or
    rebalanced. Replayed: records delivered again because a change moved the
    stream back (on purpose, not duplicates).
    """
    v = Verdict(records=len(records))
    starts = [0] + [c.offset for c in changes]
    delivered = [set() for _ in starts]
    frontier = list(starts)                 # per continuation: highest offset delivered + 1
    foreign_commits = {c for f in foreign for c in f.commits}
    commit_points = [{s} | foreign_commits for s in starts]
    first_pos: dict[int, int] = {}
    entered = [False] * len(starts)
    entered[0] = True
    seen: set[int] = set()                  # every offset delivered anywhere so far
    cur = 0
    prev: Rec | None = None
    bad_run = False
    for r in records:
        x = r.offset
        was_seen = x in seen
        if seqs is not None and x in seqs and seqs[x] != r.seq:
            v.mismatched += 1
            v.note(f"{where}@{x}: payload seq {r.seq}, the producer wrote seq {seqs[x]} there")
        nxt = _continuation_of(r, cur, changes, frontier[cur], foreign_commits)
        new_run = prev is None or nxt != cur or r.batch != prev.batch or x != prev.offset + 1
        if new_run and prev is not None and r.batch != prev.batch:
            commit_points[cur].add(prev.offset + 1)     # the end of a batch: a point the stream may commit
        if nxt != cur:
            forced = _forced(r, changes)
            if starts[nxt] < 0:
                # Not an offset (the host applied OFFSET_INVALID or the like): reported by the soak as an
                # invalid change; here the continuation is taken to start wherever the stream went.
                v.note(f"{where}: change #{nxt} to {starts[nxt]} (not an offset) was applied; the stream went on "
                       f"from {x}")
                starts[nxt] = frontier[nxt] = x
                commit_points[nxt] = {x}
            elif forced > cur and nxt == forced and x != starts[nxt] and x not in foreign_commits:
                v.note(f"{where}: change #{nxt} to {starts[nxt]} was applied (call returned or history showed "
                       f"it before byte {changes[nxt - 1].hi}) but the next record is offset {x} (byte {r.pos})")
            cur = nxt
            entered[cur] = True
        prev = r
        first_pos.setdefault(cur, r.pos)
        start = starts[cur]
        if new_run:
            # A run re-delivering below what the continuation reached must start at a commit point.
            bad_run = x < frontier[cur] and x not in commit_points[cur]
            if bad_run and x >= start:
                v.note(f"{where}@{x} (byte {r.pos}): re-delivery in continuation #{cur} (start {start}, reached "
                       f"{frontier[cur]}) from {x}, which is not a commit point (the start or a batch end)")
        seen.add(x)
        if x < start:
            v.stale += 1
            v.note(f"{where}@{x} (byte {r.pos}): below the continuation of change #{cur} to {start}")
            continue
        if bad_run and x < frontier[cur]:
            v.stale += 1
        elif x in delivered[cur]:
            v.duplicates += 1
        elif was_seen:
            v.replayed += 1
        delivered[cur].add(x)
        frontier[cur] = max(frontier[cur], x + 1)
    # A change surely applied after the last record starts a (possibly empty) last continuation.
    last = max([cur] + [j for j, c in enumerate(changes, 1) if c.hi is not None and j > cur], default=cur)
    entered[last] = True
    claims = {j - 1: c.claim for j, c in enumerate(changes, 1) if c.claim is not None}
    excused = _foreign_excused(foreign, first_pos, changes, entered)
    for i, start in enumerate(starts):
        if not entered[i] or start < 0:
            continue
        end = max(frontier[i], log_end) if i == last else frontier[i]
        claimed = claims.get(i)
        expected = set(range(start, end))
        for o in sorted(expected - delivered[i]):
            if o in excused.get(i, ()):
                v.foreign += 1
            elif o in seen:
                v.skipped += 1
            else:
                v.lost += 1
        if claimed is not None and claimed > end:   # a foreign member's commit is a claim the stream may carry
            taken = [o for o in range(end, claimed) if o not in seen and o in excused.get(i, ())]
            v.foreign += len(taken)
            missing = [o for o in range(end, claimed) if o not in seen and o not in excused.get(i, ())]
            v.lost += len(missing)
            if missing:
                v.note(f"{where}: the stream reported position/committed {claimed} in continuation #{i} "
                       f"(start {start}) but offsets {_ranges(missing)} were never delivered")
        holes = sorted(expected - delivered[i] - excused.get(i, set()))
        if holes:
            v.note(f"{where}: continuation #{i} (start {start}, end {end}) misses {_ranges(holes)}")
    return v


def _foreign_excused(foreign, first_pos: dict[int, int], changes: list[Change], entered: list[bool]) -> dict:
    """Per continuation: the offsets foreign members consumed and committed past while it was current."""
    if not foreign:
        return {}
    # a continuation is current from its change's call on (a foreign member may take the partition over right
    # after the change applied, before the stream wrote a record of it), or from its first record if earlier
    spans = sorted((min(first_pos.get(i, changes[i - 1].lo), changes[i - 1].lo) if i else 0, i)
                   for i, e in enumerate(entered) if e)
    out: dict[int, set[int]] = {}
    for k, (begin, i) in enumerate(spans):
        end = spans[k + 1][0] if k + 1 < len(spans) else float("inf")
        for f in foreign:
            if f.lo < end and f.hi > begin:
                out.setdefault(i, set()).update(f.taken)
    return out


def _forced(r: Rec, changes: list[Change]) -> int:
    """The last change surely applied before `r` was written (0: none)."""
    return max((j for j, c in enumerate(changes, 1) if c.hi is not None and r.pos >= c.hi), default=0)


def _continuation_of(r: Rec, cur: int, changes: list[Change], reached: int,
                     foreign_commits: set[int] | frozenset[int] = frozenset()) -> int:
    """The continuation `r` belongs to; `reached`: how far the current one (`cur`) has delivered; a foreign
    member's commit is a point the stream got to without delivering (it took the partition over there)."""
    forced = _forced(r, changes)
    lowest = max(cur + 1, forced)
    candidate = None
    for j in range(lowest, len(changes) + 1):
        c = changes[j - 1]
        if c.lo > r.pos:
            break
        got_to = max([reached, *(f for f in foreign_commits if c.previous is not None and f <= c.previous)])
        backward_not_yet = c.previous is not None and c.offset < c.previous and got_to < c.previous
        if c.offset == r.offset and not backward_not_yet:
            candidate = j
            break
    if candidate is None:
        return max(cur, forced)
    # a chain of changes to one offset, applied back to back: the last of them. A later change applied where the
    # stream stood elsewhere (its `previous`) after this one was applied (it has a `previous` too) came after
    # this one's records, not before them: no link. (This one never applied, superseded by the later: a link.)
    while candidate < len(changes) and changes[candidate].lo <= r.pos and changes[candidate].offset == r.offset \
            and not _read_from_between(changes[candidate - 1], changes[candidate]):
        candidate += 1
    return candidate


def _read_from_between(first: Change, later: Change) -> bool:
    """Two changes to one offset: was the stream reading from the first's offset when the later was applied (the
    first known applied, the later applied where the stream stood past it)?"""
    return first.previous is not None and later.previous is not None and later.previous != later.offset


def _ranges(offsets: list[int]) -> str:
    out, first, last = [], None, None
    for o in offsets:
        if first is not None and o == last + 1:
            last = o
            continue
        if first is not None:
            out.append(f"{first}" if first == last else f"{first}-{last}")
        first = last = o
    if first is not None:
        out.append(f"{first}" if first == last else f"{first}-{last}")
    shown = ", ".join(out[:6])
    return shown + (f" (+{len(out) - 6} more ranges)" if len(out) > 6 else "")


def read_sink(path: Path) -> tuple[dict[tuple[str, int], list[Rec]], int]:
    """Records per (topic, partition) in file order, and the number of lines that are not a whole statement."""
    out: dict[tuple[str, int], list[Rec]] = defaultdict(list)
    corrupt = 0
    if not path.exists():
        return out, 0
    data = path.read_bytes()
    pos = 0
    for line in data.split(b"\n"):
        if line and not line.startswith((FRAME_PREFIX, OFFSET_LINE_PREFIX, MARK_LINE_PREFIX)):   # a batch's frame, its offsets
            m = _LINE.fullmatch(line)
            if m is None:
                corrupt += 1
            else:
                out[(m["topic"].decode(), int(m["partition"]))].append(
                    Rec(int(m["offset"]), int(m["seq"]), m["batch"].decode(), pos))
        pos += len(line) + 1
    return out, corrupt
