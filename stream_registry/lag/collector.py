"""Collection: every stream's partitions sampled every `interval` seconds, evaluated, kept for an hour.

A `LagCollector` runs one background thread over a StreamRegistry. Each round
takes, per stream, what `describe` already asks the cluster in batched calls
(watermarks: two ListOffsets for all partitions; committed offsets: one
OffsetFetch) and whether the stream's consumer polls each partition; never a
request per partition. Then, per partition with lag, the first unprocessed
record's timestamp is read where that is cheap (one assign-only reader per
stream, every lagging partition in one consume loop, bounded in time; a
partition's answer is kept until its committed offset moves), which also tells
when the offsets left are not records at all. Evaluation is the pure
functions of `verdict` and `seconds`; this module only feeds them.

A stream's last round is a `StreamLag`; `series` keeps its totals over the last
hour (for charts), with the offset changes applied meanwhile. Once the sampler
runs (start()), a reader never waits for it: `lag`, `streams` and `series` answer
from the last round at once, with its age (`age_s`), however long a round takes
on an unreachable cluster; a stream not sampled yet says so. A collector that
was never started samples when asked (an embedded registry's).
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import pairwise

from ..errors import KafkaOperationError, StreamError
from ..kafka.timestamps import FirstRecord, FirstRecords
from ..model import (
    ChangeStatus,
    LagPoint,
    LagSecondsMethod,
    PartitionKey,
    PartitionLag,
    StreamInfo,
    StreamLag,
    StreamStatus,
)
from ..registry.registry import StreamRegistry
from .history import LagHistory
from .outage import UNREACHABLE_CODES, aged, consumer_outage, counts, loss_verdict, unsampled
from .seconds import extrapolated, from_timestamp
from .verdict import WINDOW, LagSample, OffsetChangeMark, PartitionVerdict, evaluate, stream_verdict

log = logging.getLogger("mgstreams.lag")

DEFAULT_INTERVAL_S = 5.0
KEEP_S = 3600.0             # an hour of totals per stream, and of samples per partition for extrapolation
MAX_SAMPLES = 720           # per partition: an hour at the default interval
CLOSE_WAIT_S = 2.0          # how long close() waits for a round in progress
PROBE_BUDGET_S = 1.0        # the longest one stream's timestamp reads may take per round
PROBE_RETRY_S = 30.0        # a partition whose record could not be read is extrapolated this long (at most
                            # 5 sample intervals) before a retry
OFFSET_CHANGES = (ChangeStatus.APPLIED, ChangeStatus.CLAMPED, ChangeStatus.REALIGNED)


@dataclass
class _Tracked:
    name: str
    samples: dict[PartitionKey, deque] = field(default_factory=dict)
    changes: deque = field(default_factory=deque)          # OffsetChangeMark, the last hour
    changes_total: int | None = None
    last_change_id: int = 0
    points: deque = field(default_factory=deque)           # LagPoint, the last hour
    # per partition: (offset, end, answer)
    first_records: dict[PartitionKey, tuple[int, int, FirstRecord]] = field(default_factory=dict)
    unreadable: dict[PartitionKey, float] = field(default_factory=dict)   # tp: when to try reading it again
    reader: FirstRecords | None = None
    reader_error: str | None = None
    latest: StreamLag | None = None
    unreachable_since: float | None = None   # the first round in a row that could not sample it
    running_since: float | None = None   # when the current run was first sampled running (None: not running)
    pid: int | None = None               # the process of that run: another pid is another run
    lock: threading.Lock = field(default_factory=threading.Lock)       # its points and changes, held briefly
    sampling: threading.Lock = field(default_factory=threading.Lock)   # a round (Kafka I/O) of this stream


class LagCollector:
    """Samples `registry`'s streams every `interval` s on a thread of its own (start()/close())."""

    def __init__(self, registry: StreamRegistry, interval: float = DEFAULT_INTERVAL_S, *, window: int = WINDOW,
                 keep_s: float = KEEP_S, read_timestamps: bool = True, clock: Callable[[], float] = time.time,
                 history: LagHistory | None = None):
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0 < interval <= 3600:
            raise StreamError(f"lag_sample_interval: must be from 0 to 3600 seconds, got {interval!r}")
        self._registry = registry
        self.interval = float(interval)
        self._window = window
        self._keep_s = keep_s
        self._max_samples = max(window, min(MAX_SAMPLES, int(keep_s / self.interval) + 1))
        self._read_timestamps = read_timestamps
        self._clock = clock
        self._history = history   # the totals kept in the state directory: a restarted host's charts go on
        self._tracked: dict[str, _Tracked] = {}
        self._unreachable: dict[str, KafkaOperationError] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> LagCollector:
        self._thread = threading.Thread(target=self._run, name="mgstreams-lag", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(CLOSE_WAIT_S)   # a round stuck on an unreachable cluster keeps no host from stopping
        with self._lock:
            tracked, self._tracked = list(self._tracked.values()), {}
        for t in tracked:
            if t.sampling.acquire(timeout=0 if self._thread is not None and self._thread.is_alive() else 5):
                try:
                    self._close_reader(t)
                finally:
                    t.sampling.release()

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.sample()
            except Exception:   # a bug must not end sampling for good; the next round tries again
                log.exception("lag sampling round failed")
            self._stop.wait(max(self.interval - (time.monotonic() - began), 0.05))

    # -- reading -------------------------------------------------------------------------
    def lag(self, name: str) -> StreamLag:
        """The stream's last round, with its age. StreamNotFound for an unknown name."""
        info = self._registry.get(name)
        return self._last(self._track(name), info)

    def streams(self) -> list[StreamLag]:
        """Every stream's last round, with its age, by name."""
        return [self._last(self._track(info.name), info) for info in self._registry.list()]

    def _last(self, t: _Tracked, info: StreamInfo) -> StreamLag:
        """What the last round found (its age said); a stream without one yet is sampled now only when no
        sampler runs, else said to be not sampled yet."""
        latest = t.latest
        if latest is None:
            if self._thread is None:
                return self._sample_stream(t, info)
            verdict = stream_verdict(info.status, {}, error=info.error)
            return StreamLag(name=info.name, consumer_group=info.consumer_group, stream_status=info.status,
                             status=verdict.verdict, message=f"{verdict.message}; not sampled yet (the sampler "
                             f"samples every {self.interval:g} s)", total_lag=None, max_lag=None, max_lag_seconds=None,
                             records_per_second=0.0, sampled_at=None, interval_s=self.interval,
                             dead_lettered=info.dead_lettered)
        return aged(latest, self._clock())

    def latest(self) -> list[StreamLag]:
        """What the last rounds found, without sampling anything (for scrapes)."""
        with self._lock:
            tracked = sorted(self._tracked.values(), key=lambda t: t.name)
        return [t.latest for t in tracked if t.latest is not None]

    def series(self, name: str) -> tuple[list[LagPoint], list[OffsetChangeMark]]:
        """The stream's totals over the last hour and the offset changes applied meanwhile, oldest first."""
        self._registry.get(name)
        tracked = self._track(name)
        with tracked.lock:   # never held across a round's Kafka I/O
            return list(tracked.points), list(tracked.changes)

    # -- sampling ------------------------------------------------------------------------
    def sample(self) -> None:
        """One round over every stream."""
        self._unreachable = {}   # bootstrap servers found unreachable this round: their other streams are too
        infos = self._registry.list()
        names = {i.name for i in infos}
        with self._lock:
            gone = [t for n, t in self._tracked.items() if n not in names]
            for t in gone:
                del self._tracked[t.name]
        for t in gone:
            with t.sampling:
                self._close_reader(t)
            if self._history is not None:
                self._history.forget(t.name)
        for info in infos:
            if self._stop.is_set():
                return
            self._sample_stream(self._track(info.name), info)

    def _track(self, name: str) -> _Tracked:
        with self._lock:
            if name not in self._tracked:   # with the hour before this host started, as the last one kept it
                self._tracked[name] = _Tracked(name, points=deque(self._history.load(
                    name, self._clock() - self._keep_s) if self._history is not None else ()))
            return self._tracked[name]

    def _sample_stream(self, t: _Tracked, info: StreamInfo) -> StreamLag:
        """One round for one stream: its StreamLag, also kept as `t.latest`."""
        with t.sampling:
            try:
                unreachable = self._unreachable.get(info.bootstrap_servers) or consumer_outage(info)
                if unreachable is not None:   # its consumer, or another stream of this cluster, found it away
                    raise unreachable
                rows = self._registry.describe(info.name)
                tallies = counts(info, self._registry)   # asks the registry too: a drop since is caught here
                self._changes(t)
            except StreamError as exc:   # Kafka away, or dropped meanwhile: say so (ERR), keep the samples
                if isinstance(exc, KafkaOperationError) and exc.code in UNREACHABLE_CODES:
                    self._unreachable[info.bootstrap_servers] = exc
                t.latest = unsampled(t, info, exc, self._clock(), self.interval)
                return t.latest
            t.unreachable_since = None
            now = self._clock()
            running = info.status == StreamStatus.RUNNING
            if not running:
                t.running_since = None
            elif t.running_since is None or info.pid != t.pid or (t.latest and t.latest.stream_status != info.status):
                t.running_since = now
            t.pid = info.pid
            lagging: dict[PartitionKey, tuple[int, int]] = {}
            for r in rows:
                consumed = r.committed_offset if r.committed_offset is not None else r.log_start_offset
                if r.log_end_offset > consumed:
                    lagging[PartitionKey(r.topic, r.partition)] = (consumed, r.log_end_offset)
            first = self._first_records(t, info, lagging)
            verdicts: dict[PartitionKey, PartitionVerdict] = {}
            partitions = []
            lags: list[int] = []   # this round's, per partition (known: the round sampled them)
            seen = set()
            for r in rows:
                tp = PartitionKey(r.topic, r.partition)
                seen.add(tp)
                record = first.get(tp)
                sample = LagSample(r.committed_offset, r.log_end_offset, now, polling=running and r.assigned,
                                   log_start=min(r.log_start_offset, r.log_end_offset),
                                   nothing_to_read=record is not None and not record.found)
                history = t.samples.setdefault(tp, deque(maxlen=self._max_samples))
                if history and history[-1].at > now:   # the clock went back: start the partition over
                    history.clear()
                history.append(sample)
                window = list(history)[-self._window:]
                marks = [c for c in t.changes if (c.topic, c.partition) == tp]
                verdict = evaluate(window, marks, window=self._window, running_since=t.running_since)
                verdicts[tp] = verdict
                seconds, method = self._seconds(t, list(history), record, now)
                lags.append(sample.lag)
                partitions.append(PartitionLag(topic=r.topic, partition=r.partition,
                                               committed_offset=r.committed_offset, log_start_offset=r.log_start_offset,
                                               log_end_offset=r.log_end_offset, lag=sample.lag, lag_seconds=seconds,
                                               lag_seconds_method=method, status=verdict.verdict,
                                               message=verdict.message, alarm=verdict.alarm,
                                               change_id=verdict.change_id, assigned=r.assigned))
            for tp in [tp for tp in t.samples if tp not in seen]:   # a topic that went away
                del t.samples[tp]
            known = [p.lag_seconds for p in partitions if p.lag_seconds is not None]
            total = sum(lags)
            committed = sum(p.committed_offset or 0 for p in partitions)
            totals = [(p.at, p.total_lag, p.committed) for p in t.points if t.running_since is not None
                      and p.at >= t.running_since][-(self._window - 1):] + [(now, total, committed)]
            overall = loss_verdict(info) or stream_verdict(info.status, verdicts, totals, error=info.error)
            status, message = overall.verdict, overall.message
            if info.status != StreamStatus.RUNNING:   # what the stream is decides for its partitions too, at once
                partitions = [dataclasses.replace(p, status=overall.verdict, message=overall.message,
                                                  alarm=overall.alarm, change_id=None) for p in partitions]
            rate = self._records_per_second(t) if running else 0.0
            t.latest = latest = StreamLag(name=info.name, consumer_group=info.consumer_group,
                                 stream_status=info.status, status=status, message=message, total_lag=total,
                                 max_lag=max(lags, default=0),
                                 max_lag_seconds=max(known) if known else None, records_per_second=rate,
                                 sampled_at=datetime.fromtimestamp(now, tz=UTC), interval_s=self.interval,
                                 offset_changes=t.changes_total or 0, dead_lettered=info.dead_lettered, error=None,
                                 partitions=tuple(partitions), **tallies)
            point = LagPoint(at=now, total_lag=total, max_lag_seconds=latest.max_lag_seconds,
                             records_per_second=rate, status=status, committed=committed,
                             partitions=tuple((p.topic, p.partition, lag) for p, lag in zip(partitions, lags, strict=True)))
            if self._history is not None:
                self._history.append(t.name, point, now - self._keep_s)
            with t.lock:
                t.points.append(point)
                while t.points and t.points[0].at < now - self._keep_s:
                    t.points.popleft()
                while t.changes and t.changes[0].at < now - self._keep_s:
                    t.changes.popleft()
            return latest

    def _seconds(self, t: _Tracked, history: list[LagSample], record: FirstRecord | None, now: float
                 ) -> tuple[float | None, LagSecondsMethod]:
        usable = self._read_timestamps and t.reader_error is None   # how lag would be measured here
        last = history[-1]
        if last.caught_up:
            return 0.0, LagSecondsMethod.TIMESTAMP if usable else LagSecondsMethod.EXTRAPOLATED
        if record is not None and record.found and record.timestamp_ms is not None:
            return from_timestamp(record.timestamp_ms, now), LagSecondsMethod.TIMESTAMP
        return extrapolated(history, now), LagSecondsMethod.EXTRAPOLATED

    def _records_per_second(self, t: _Tracked) -> float:
        """Offsets committed per second over the verdict window of the current run, summed over partitions
        (moves back ignored)."""
        total, span = 0, 0.0
        for history in t.samples.values():
            window = [s for s in list(history)[-self._window:] if s.at >= (t.running_since or 0.0)]
            if len(window) < 2:
                continue
            span = max(span, window[-1].at - window[0].at)
            total += sum(max((b.committed or 0) - (a.committed or 0), 0) for a, b in pairwise(window)
                         if a.committed is not None and b.committed is not None)
        return round(total / span, 3) if span > 0 else 0.0

    def _first_records(self, t: _Tracked, info: StreamInfo, lagging: dict[PartitionKey, tuple[int, int]]
                       ) -> dict[PartitionKey, FirstRecord]:
        """The first record at each lagging partition's committed offset: remembered while the offset stays
        (a record found stays the first one; "nothing there" only while the log end stays too)."""
        for tp in [tp for tp in t.first_records if tp not in lagging]:
            del t.first_records[tp]
        if not self._read_timestamps or not lagging:
            return {}
        known, wanted = {}, {}
        now = time.monotonic()
        for tp, (offset, end) in lagging.items():
            cached = t.first_records.get(tp)
            if cached and cached[0] == offset and (cached[2].found or cached[1] == end):
                known[tp] = cached[2]
            elif t.unreadable.get(tp, 0.0) <= now:
                wanted[tp] = (offset, end)
        if wanted:
            reader = self._reader(t, info)
            if reader is not None:
                try:
                    answers = reader.read(wanted, PROBE_BUDGET_S)
                except Exception as exc:   # librdkafka refusing the reader's setup: extrapolate instead
                    log.warning("stream %s: cannot read record timestamps: %s", info.name, exc)
                    answers = {}
                for tp in wanted:
                    if tp in answers:
                        t.first_records[tp] = (*wanted[tp], answers[tp])
                        known[tp] = answers[tp]
                        t.unreadable.pop(tp, None)
                    else:   # no answer in time (leader away, offset deleted): extrapolate for a while
                        t.unreadable[tp] = now + min(PROBE_RETRY_S, 5 * self.interval)
        return known

    def _reader(self, t: _Tracked, info: StreamInfo) -> FirstRecords | None:
        if t.reader is None and t.reader_error is None:
            try:
                config = self._registry.config(info.name)   # the secrets the reader needs
                t.reader = FirstRecords(config.bootstrap.text, config.kafka_settings(),
                                        config.secret_values())
            except StreamError as exc:
                t.reader_error = str(exc)
                log.warning("stream %s: lag seconds are extrapolated: %s", info.name, exc)
        return t.reader

    def _close_reader(self, t: _Tracked) -> None:
        if t.reader is not None:
            t.reader.close()
            t.reader = None

    def _changes(self, t: _Tracked) -> None:
        """Offset changes recorded since the last round (all of them the first time, for the total)."""
        if t.changes_total is None:
            entries = self._registry.history(t.name)
            t.changes_total = 0
        else:
            limit = 64
            while True:
                entries = self._registry.history(t.name, limit)
                if len(entries) < limit or _change_id(entries[-1]) <= t.last_change_id:
                    break
                limit *= 4
        new = [e for e in entries if _change_id(e) > t.last_change_id]
        if not new:
            return
        t.last_change_id = max(_change_id(e) for e in new)
        applied = [e for e in reversed(new) if e.status in OFFSET_CHANGES]   # oldest first
        t.changes_total += len(applied)
        horizon = self._clock() - self._keep_s
        with t.lock:
            t.changes.extend(OffsetChangeMark(e.change_id, e.changed_at.timestamp(), e.topic, e.partition,
                                              e.previous_offset, e.offset, e.status == ChangeStatus.REALIGNED)
                             for e in applied if e.changed_at.timestamp() >= horizon)


def _change_id(entry) -> int:
    """A history row's id (0 for a row without one: seen)."""
    return entry.change_id or 0
