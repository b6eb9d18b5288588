"""Lag verdicts: Burrow's evaluation rules as pure functions over samples, without its false alarms or flaps.

A sample is what the host saw of one partition at one moment: the group's
committed offset, the log end at that moment, and whether the stream's
consumer was polling the partition. Over a window of the last samples
(`WINDOW`, 10) a partition gets one verdict, checked in this order:

- **REWIND** when the committed offset went backwards in the window. When an
  offset change made through `set_stream_offset` explains the move, the message
  names that change (its history id) and the verdict is no alarm; otherwise it
  is one (someone reset the group's offsets behind the host's back).
  An operator's rewind is shown until a later sample finds the partition caught
  up again (then OK, naming the change), not for as long as it stays in the
  window: a set-offset on a stream at lag 0 is read again within a sample or two.
- **OK** when the partition was caught up in some sample (after the last rewind):
  lag 0, or nothing left to read (the offsets below the log end are transaction
  markers or aborted records, which no consumer can ever commit past).
- **STARTING** while fewer than `MIN_SAMPLES` samples exist, and while the
  stream's current run is younger than the window and the partition has not
  moved in it (the consumer has not reached it yet): not a stall.
- **STOP** when no commit happened over the whole window while lag exists and no
  consumer of the stream polls the partition (not assigned).
- **STALL** when the committed offset did not move over the window while lag
  exists and the consumer polls (a batch that never finishes, a stuck sink).
- **WARN** when the lag rises: the slope of a least-squares line through the
  window's lags is positive and significant (`SIGNIFICANCE` standard errors
  above zero). Burrow asks for growth in every sample, which a consumer
  committing in batches breaks now and then: its verdict flapped OK/WARN on a
  stream falling steadily behind. A slope does not; noise around a flat lag
  is not significant.
- else **OK**.

A stream's verdict (`stream_verdict`) is STOP at once for a stream that is not
running (stopped, created, failed), STARTING while its group has not assigned
partitions, else its worst partition's, raised to WARN when the slope of its
total lag is significantly positive (several partitions each a little behind).

Where this differs from Burrow, on purpose: lag is taken from the log end at
sample time, not only when the consumer commits (a consumer that committed at
lag 0 and then stopped while producers went on is STOP, not OK); a quiet
partition (no new data, so no new commits) is OK, not STOP, because the host
samples it whether or not the consumer commits; an operator's rewind is said to
be one. Nothing here reads a clock or Kafka: collection
(stream_registry.lag.collector) feeds it.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise

from ..errors import ConfigError
from ..model import PartitionKey, StreamStatus, Verdict

WINDOW = 10          # samples per partition a verdict looks at (Burrow's default window)
MIN_SAMPLES = 3      # fewer than this say nothing about a trend: STARTING "not enough samples yet"
REWIND_SLACK_S = 5.0 # an offset change recorded this close to a backwards move explains it
SIGNIFICANCE = 3.0   # a rising lag is WARN when its slope is this many standard errors above zero


@dataclass(frozen=True)
class LagSample:
    """One partition at one moment (`at`: seconds since the epoch).

    `committed` is None while the group has committed nothing: then everything
    from `log_start` on is unprocessed. `polling` says that the stream's consumer
    runs and holds the partition. `nothing_to_read` says that no record lies
    between the committed offset and the log end (the collector knows it from
    reading there: transaction markers and aborted records are not records).
    """
    committed: int | None
    log_end: int
    at: float
    polling: bool = True
    log_start: int = 0
    nothing_to_read: bool = False

    def __post_init__(self) -> None:
        for name in ("log_end", "log_start"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name}: must be an offset >= 0, got {value!r}")
        if self.committed is not None and (isinstance(self.committed, bool) or not isinstance(self.committed, int)
                                           or self.committed < 0):
            raise ConfigError(f"committed: must be an offset >= 0 or None, got {self.committed!r}")

    @property
    def lag(self) -> int:
        """Offsets between what the group committed and the log end, at sample time."""
        consumed = self.log_start if self.committed is None else self.committed
        return max(self.log_end - consumed, 0)

    @property
    def caught_up(self) -> bool:
        return self.lag == 0 or self.nothing_to_read


@dataclass(frozen=True)
class OffsetChangeMark:
    """An offset change applied through set_stream_offset, as its history row records it."""
    change_id: int | None
    at: float
    topic: str
    partition: int
    previous_offset: int | None
    offset: int
    realigned: bool = False   # not a call: an exactly-once stream realigned to its sink (history status realigned)


@dataclass(frozen=True)
class PartitionVerdict:
    """A partition's verdict with the reason in words; `alarm` is False for what needs no one's attention
    (OK, and a rewind an operator made)."""
    verdict: Verdict
    message: str
    alarm: bool = False
    change_id: int | None = None    # REWIND, or OK caught up again after it: the offset change that explains it


def evaluate(samples: Sequence[LagSample], changes: Iterable[OffsetChangeMark] = (), *,
             window: int = WINDOW, min_samples: int = MIN_SAMPLES,
             running_since: float | None = None) -> PartitionVerdict:
    """One partition's verdict over its last `window` samples (oldest first); `changes` are the operator's
    offset changes of this partition (any order; those outside the window are ignored); `running_since` is
    when the stream's current run began (None: before these samples)."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 2:
        raise ConfigError(f"window: must be an integer >= 2, got {window!r}")
    if isinstance(min_samples, bool) or not isinstance(min_samples, int) or not 2 <= min_samples <= window:
        raise ConfigError(f"min_samples: must be an integer from 2 to the window ({window}), got {min_samples!r}")
    samples = list(samples)[-window:]
    if not samples:
        return PartitionVerdict(Verdict.STARTING, "no samples yet")
    if any(b.at < a.at for a, b in pairwise(samples)):
        raise ConfigError("samples: must be in time order, oldest first")
    rewind = _last_rewind(samples, list(changes))
    since = samples[rewind[0]:] if rewind else samples   # what happened after the last rewind
    last = samples[-1]
    if any(s.caught_up for s in since):
        if rewind and not rewind[1].alarm and any(s.caught_up for s in since[1:]):
            # an operator's rewind read again and caught up in a later sample: said once, not for the whole window
            # (the change stays named, with its id, while it is in the window)
            said = rewind[1].message.removesuffix("; not an alarm")
            return PartitionVerdict(Verdict.OK, f"{_caught_up_message(since)} again after: {said}",
                                    change_id=rewind[1].change_id)
        return rewind[1] if rewind else PartitionVerdict(Verdict.OK, _caught_up_message(since))
    if len(samples) < min_samples:
        return rewind[1] if rewind else PartitionVerdict(
            Verdict.STARTING, f"lag {last.lag}; {len(samples)} of {min_samples} samples needed for a trend")
    span = last.at - samples[0].at
    this_run = [s for s in samples if running_since is not None and s.at >= running_since]
    age = None if running_since is None else last.at - running_since
    young = age is not None and len(this_run) < window   # the run is younger than the window
    if young and last.polling and len({s.committed for s in this_run}) <= 1 and not rewind:
        return PartitionVerdict(Verdict.STARTING, f"lag {last.lag}; no commit on this partition since the stream "
                                                  f"started {age:.1f} s ago (not reached yet); a stall needs "
                                                  f"{window} samples without one")
    if not rewind and len({s.committed for s in samples}) == 1:   # no commit over the whole window
        where = "nothing committed yet" if last.committed is None else f"committed offset {last.committed}"
        if not last.polling:
            return PartitionVerdict(Verdict.STOP, f"no commit for {span:.1f} s with lag {last.lag} ({where}); "
                                                  f"no consumer of the stream polls this partition", alarm=True)
        return PartitionVerdict(Verdict.STALL, f"{where} not moving for {span:.1f} s with lag {last.lag} "
                                               f"while the consumer polls", alarm=True)
    # The trend from when the partition began moving: a wait before the consumer reached it is no trend.
    moved = next((i for i, s in enumerate(since) if s.committed != since[0].committed), 1)
    moving = since[moved - 1:]
    rising = lag_trend([(s.at, s.lag) for s in moving])
    if rising is not None and rising.rising and not keeping_up([(s.at, s.lag, s.committed) for s in moving]):
        return PartitionVerdict(Verdict.WARN, f"lag rising {rising.slope:+.1f}/s: {moving[0].lag} to {last.lag} "
                                              f"in {last.at - moving[0].at:.1f} s", alarm=True)
    if rewind:
        return rewind[1]
    if young and len(moving) < min_samples:   # just reached: its lag has no trend yet, either way
        return PartitionVerdict(Verdict.STARTING, f"lag {last.lag}; consuming since {_time(moving[0].at)}, "
                                                  f"{len(moving)} of {min_samples} samples needed for a trend")
    trend = "falling" if last.lag < samples[0].lag else "not falling" if last.lag > samples[0].lag else "steady"
    return PartitionVerdict(Verdict.OK, f"consuming: lag {last.lag}, {trend} over {span:.1f} s")


@dataclass(frozen=True)
class Trend:
    """A least-squares line through (time, lag) points: `slope` in offsets per second, `t` its size in
    standard errors (inf for points exactly on a line)."""
    slope: float
    t: float

    @property
    def rising(self) -> bool:
        return self.slope > 0 and self.t >= SIGNIFICANCE


def lag_trend(points: Sequence[tuple[float, int]], min_samples: int = MIN_SAMPLES) -> Trend | None:
    """The trend of lags over time; None for fewer than `min_samples` points or no time between them."""
    if len(points) < max(min_samples, 3):
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((t - mean_t) ** 2 for t, _ in points)
    if sxx <= 0:
        return None
    slope = sum((t - mean_t) * (y - mean_y) for t, y in points) / sxx
    residual = sum((y - mean_y - slope * (t - mean_t)) ** 2 for t, y in points)
    error = math.sqrt(residual / (n - 2) / sxx)
    if error == 0:
        return Trend(slope, math.inf if slope else 0.0)
    return Trend(slope, slope / error)


def keeping_up(points: Sequence[tuple[float, int, int | None]]) -> bool:
    """Whether in some sample (time, lag, committed) the lag was no more than what the consumer committed since
    the sample before: it could clear it within one interval. A consumer keeping up with a steady producer
    is seldom seen at lag 0 exactly (the records of its next batch are there), and such lag is no trend."""
    return any(a[2] is not None and b[2] is not None and 0 <= b[1] <= b[2] - a[2]
               for a, b in pairwise(points))


@dataclass(frozen=True)
class StreamVerdict:
    verdict: Verdict
    message: str
    alarm: bool = False


def stream_verdict(status: StreamStatus, partitions: Mapping[PartitionKey, PartitionVerdict],
                   totals: Sequence[tuple[float, int, int]] = (), *, error: str | None = None) -> StreamVerdict:
    """A stream's verdict from its state, its partitions' verdicts and its totals over the window (`totals`:
    (time, total lag, total committed) of the current run, oldest first)."""
    if status in (StreamStatus.STOPPED, StreamStatus.CREATED, StreamStatus.ERROR):
        lag = f"total lag {totals[-1][1]}" if totals else "not sampled"
        if status == StreamStatus.ERROR:
            return StreamVerdict(Verdict.STOP, f"the stream failed ({error or 'no reason given'}); {lag}",
                                 alarm=True)
        return StreamVerdict(Verdict.STOP, f"the stream is {status.value}: nothing consumes; {lag}")
    if status == StreamStatus.STARTING:
        return StreamVerdict(Verdict.STARTING, "waiting for the group to assign partitions")
    verdict, message = worst(partitions)
    alarm = any(v.alarm for v in partitions.values() if v.verdict == verdict)
    if verdict.severity >= Verdict.WARN.severity or not totals or keeping_up(totals) \
            or min(total for _, total, _ in totals) == 0 or any(v.verdict == Verdict.REWIND for v in partitions.values()):
        return StreamVerdict(verdict, message, alarm)
    rising = lag_trend([(at, total) for at, total, _ in totals])
    if rising is not None and rising.rising:
        span = totals[-1][0] - totals[0][0]
        return StreamVerdict(Verdict.WARN, f"total lag rising {rising.slope:+.1f}/s: {totals[0][1]} to "
                                           f"{totals[-1][1]} in {span:.1f} s", alarm=True)
    return StreamVerdict(verdict, message, alarm)


def _caught_up_message(samples: Sequence[LagSample]) -> str:
    last = samples[-1]
    if last.lag == 0:
        return "caught up"
    if last.nothing_to_read:
        return (f"caught up: the {last.lag} offset(s) below the log end are not records "
                f"(transaction markers or aborted records)")
    return f"lag {last.lag}; it was 0 within the window"


def _last_rewind(samples: list[LagSample], changes: list[OffsetChangeMark]
                 ) -> tuple[int, PartitionVerdict] | None:
    """(index of the first sample after the last backwards move, its REWIND verdict), or None.

    A move is seen in the samples (the committed offset went down between two),
    or only in the history: an operator's rewind that the consumer re-read
    within one sample interval never shows as a lower committed offset.
    """
    seen, before, after = None, 0, 0
    for i in range(len(samples) - 1, 0, -1):
        was, now = samples[i - 1].committed, samples[i].committed
        if was is not None and now is not None and now < was:
            seen, before, after = i, was, now
            break
    backwards = [c for c in changes if c.previous_offset is not None and c.offset < c.previous_offset
                 and samples[0].at <= c.at <= samples[-1].at + REWIND_SLACK_S]
    if seen is not None:
        explained = [c for c in changes if c.offset <= after and c.offset < before
                     and samples[seen - 1].at - REWIND_SLACK_S <= c.at <= samples[seen].at + REWIND_SLACK_S]
        if explained:
            change = max(explained, key=lambda c: (c.at, c.change_id or 0))
            return seen, _operator_rewind(change, before)
        later = [c for c in backwards if c.at > samples[seen].at]
        if not later:
            return seen, PartitionVerdict(
                Verdict.REWIND, f"committed offset went back from {before} to {after} between "
                                f"{_time(samples[seen - 1].at)} and {_time(samples[seen].at)} with no offset change "
                                f"made through mgstreams (was the group's offset reset by another tool?)", alarm=True)
        backwards = later
    if not backwards:
        return None
    change = max(backwards, key=lambda c: (c.at, c.change_id or 0))
    index = next((i for i, s in enumerate(samples) if s.at >= change.at), len(samples) - 1)
    return index, _operator_rewind(change, change.previous_offset)


def _operator_rewind(change: OffsetChangeMark, before: int | None) -> PartitionVerdict:
    ident = f"change {change.change_id}" if change.change_id is not None else "a change"
    who = "realigned to what its sink stores" if change.realigned else "set_stream_offset moved it back"
    return PartitionVerdict(Verdict.REWIND, f"{who} from {before} to {change.offset} "
                                            f"({ident} at {_time(change.at)}); not an alarm",
                            change_id=change.change_id)


def _time(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def worst(verdicts: Mapping[PartitionKey, PartitionVerdict]) -> tuple[Verdict, str]:
    """A stream's verdict: its worst partition's, with that partition named in the message (a tie goes to the
    first partition in topic/partition order); OK "no partitions" for none."""
    if not verdicts:
        return Verdict.OK, "no partitions sampled yet"
    (topic, partition), pick = max(sorted(verdicts.items()), key=lambda item: item[1].verdict.severity)
    if pick.verdict == Verdict.OK:
        return Verdict.OK, "every partition OK"
    others = sum(1 for v in verdicts.values() if v.verdict == pick.verdict) - 1
    more = f" (and {others} more partition(s))" if others else ""
    return pick.verdict, f"{topic}:{partition}{more}: {pick.message}"
