"""What each step returns, the checks made on it, and the whole run's result: values, no behaviour."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from spark_bridge.backfill import BackfillJob, BackfillReport
from spark_bridge.range_plan import RangePlan
from stream_registry import OffsetChange, StreamStatus

from .settings import DemoSettings


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None          # None: not observable with this setup (shown as –, never counted as passed)
    reason: str


@dataclass(frozen=True)
class Produced:
    topic: str
    events: int
    accounts: int
    per_partition: Mapping[int, int]      # records produced to each partition
    log_end: Mapping[int, int]            # each partition's next offset after producing
    first_ts: datetime
    last_ts: datetime
    currencies: Mapping[str, int]


@dataclass(frozen=True)
class RaceResult:
    requested: int
    status_before: StreamStatus           # status right before set_stream_offset
    assigned_before: int                  # partitions streams.offsets showed as assigned right after start
    partitions: int
    changes: tuple[OffsetChange, ...]
    seconds: float                        # how long set_stream_offset waited for the group to assign


@dataclass(frozen=True)
class RewindResult:
    spec: Mapping[str, str]
    changes: tuple[OffsetChange, ...]
    records_before: int                   # live records delivered before the call
    seconds: float


@dataclass(frozen=True)
class BackfillResult:
    job: BackfillJob
    plan: RangePlan
    report: BackfillReport
    files: tuple[Path, ...]


@dataclass(frozen=True)
class Record:
    """One delivered statement: where it came from and its normalized text."""
    topic: str
    partition: int
    offset: int
    statement: str


@dataclass
class DemoResult:
    settings: DemoSettings
    checks: list[Check] = field(default_factory=list)
    produced: Produced | None = None
    race: RaceResult | None = None
    rewind: RewindResult | None = None
    backfill: BackfillResult | None = None
    host_url: str | None = None
    host_exit: int | None = None

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok is not False for c in self.checks)
