"""Where the steps tell what they do: this base class stays silent (the end-to-end test runs the same path)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spark_bridge.backfill import BackfillJob
from spark_bridge.range_plan import RangePlan

from .results import BackfillResult, Check


class Reporter:
    """Told about each step as it happens; this base class stays silent (the end-to-end test)."""

    def step(self, number: int, title: str) -> None: ...
    def say(self, text: str) -> None: ...
    def call(self, statement: str) -> None: ...                      # a CALL about to run
    def rows(self, rows: Sequence[Mapping[str, Any]]) -> None: ...   # what it returned
    def command(self, argv: Sequence[str], output: str) -> None: ...
    def backfill_plan(self, job: BackfillJob, plan: RangePlan) -> None: ...
    def backfill_progress(self, done: int, total: int) -> None: ...
    def backfill(self, result: BackfillResult) -> None: ...
    def check(self, check: Check) -> None: ...


SILENT = Reporter()   # the default of every step: tells nobody
