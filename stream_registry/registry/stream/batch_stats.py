"""What a stream's batches cost: counts and a latency histogram, for /metrics.

A stream's worker counts from zero in each process it runs in; the registry adds
those counts to what earlier runs of the stream counted, so the totals only grow
while the host runs (as Prometheus counters must).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

# Upper bounds (seconds) of the batch latency histogram: a batch takes milliseconds to seconds.
BATCH_SECONDS_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class BatchStats:
    """Batches written (and committed): messages, batches, seconds, and batches per latency bucket."""
    records: int = 0
    batches: int = 0
    seconds_sum: float = 0.0
    per_bucket: tuple[int, ...] = (0,) * (len(BATCH_SECONDS_BOUNDS) + 1)   # the last: above every bound

    def add_batch(self, records: int, seconds: float) -> BatchStats:
        index = next((i for i, bound in enumerate(BATCH_SECONDS_BOUNDS) if seconds <= bound),
                     len(BATCH_SECONDS_BOUNDS))
        per_bucket = tuple(n + (i == index) for i, n in enumerate(self.per_bucket))
        return BatchStats(self.records + records, self.batches + 1, self.seconds_sum + seconds, per_bucket)

    def __add__(self, other: BatchStats) -> BatchStats:
        return BatchStats(self.records + other.records, self.batches + other.batches,
                          self.seconds_sum + other.seconds_sum,
                          tuple(a + b for a, b in zip(self.per_bucket, other.per_bucket, strict=True)))

    def cumulative_buckets(self) -> tuple[int, ...]:
        """Prometheus' form: batches at or below each of BATCH_SECONDS_BOUNDS, then all of them (+Inf)."""
        return tuple(itertools.accumulate(self.per_bucket))
