"""Lag in seconds: how old the oldest unprocessed message of a partition is.

Two ways, and every answer says which (`LagSecondsMethod`):

- **timestamp**: now minus the timestamp of the first record at the committed
  offset, when the collector could read it cheaply (one batched fetch per
  stream; see stream_registry.kafka.timestamps).
- **extrapolated**, as kafka-lag-exporter does: the samples' log ends over time
  form a table (time, log end offset); the time at which the log end passed the
  committed offset is interpolated between the two samples around it, or
  extrapolated along the table's average rate when it is older than the table.
  Lag seconds are now minus that time.

Pure functions: the collector passes the samples and the clock.
"""
from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from .verdict import LagSample


def from_timestamp(timestamp_ms: int, now: float) -> float:
    """Seconds since a record's timestamp (0 for a timestamp in the future: clocks differ)."""
    return max(now - timestamp_ms / 1000.0, 0.0)


def extrapolated(samples: Sequence[LagSample], now: float) -> float | None:
    """kafka-lag-exporter's estimate for the last sample's committed offset, from the samples' log ends;
    None when the samples cannot say (no sample, or the log end never moved while there is lag).

    0 when the last sample has no lag. When the log end did not move over the
    samples, the record is at least as old as the first sample: that lower bound
    is returned (it grows while nothing is produced, as the record ages).
    """
    if not samples:
        return None
    last = samples[-1]
    if last.caught_up:
        return 0.0
    offset = last.log_start if last.committed is None else last.committed
    points = _table(samples)
    for (t0, e0), (t1, e1) in pairwise(points):
        if e0 <= offset < e1:   # the record at `offset` was appended between t0 and t1
            return max(now - (t0 + (offset - e0) / (e1 - e0) * (t1 - t0)), 0.0)
    (t_first, e_first), (t_last, e_last) = points[0], points[-1]
    if offset >= e_last:          # not in the table's range (the log end went back: a truncated topic)
        return 0.0
    if e_last > e_first and t_last > t_first:   # older than the table: along its average rate
        rate = (e_last - e_first) / (t_last - t_first)
        return max(now - (t_first - (e_first - offset) / rate), 0.0)
    return max(now - t_first, 0.0)


def _table(samples: Sequence[LagSample]) -> list[tuple[float, int]]:
    """(time, log end) points, in time order: the first and the last sample of each run of one log end.

    A record at offset o with e0 <= o < e1 was appended after the last sample that
    saw log end e0 and by the first one that saw e1: interpolation runs between them.
    """
    points: list[tuple[float, int]] = []
    for i, s in enumerate(samples):
        first = i == 0 or samples[i - 1].log_end != s.log_end
        last = i == len(samples) - 1 or samples[i + 1].log_end != s.log_end
        if first or last:
            points.append((s.at, s.log_end))
    return points
