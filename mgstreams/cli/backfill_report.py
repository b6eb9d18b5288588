"""What `mgstreams backfill` shows: the plan, a progress bar while it runs, the report as a table and as
JSON."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from spark_bridge.engine import EngineChoice, shown_remote
from spark_bridge.job import BackfillJob, BackfillReport
from spark_bridge.range_plan import RangePlan


class _RecordsPerSecond(ProgressColumn):
    """Offsets loaded per second, from the bar's own samples (rich keeps the last 30 s)."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("- records/s" if speed is None else f"{speed:,.0f} records/s")


def _progress_bar(console: Console) -> Progress:
    """Offsets done of all (as ranges finish), ranges done, records/s, elapsed and time left."""
    columns = (SpinnerColumn(), TextColumn("backfill"), BarColumn(),
               TextColumn("{task.completed:,.0f}/{task.total:,.0f} offsets, {task.fields[ranges]} ranges"),
               _RecordsPerSecond(), TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn())
    return Progress(*columns, console=console, transient=True)


def _offsets_done(range_plan: RangePlan, in_order: bool) -> Callable[[int, int], int]:
    """Offsets done when `done` ranges of `total` are: exact when ranges finish in order (here), else the
    ranges' mean size times how many finished (Spark runs them in any order; they are of about one size)."""
    sizes = [r.size for r in range_plan.ranges]
    if in_order:
        return lambda done, total: sum(sizes[:done])
    return lambda done, total: round(range_plan.total_offsets * done / max(total, 1))


def _with_progress(range_plan: RangePlan, console: Console, in_order: bool, run) -> BackfillReport:
    offsets = _offsets_done(range_plan, in_order)
    with _progress_bar(console) as progress:
        ranges = len(range_plan.ranges)
        task = progress.add_task("backfill", total=range_plan.total_offsets, ranges=f"0/{ranges}")
        return run(lambda done, total: progress.update(task, completed=offsets(done, total),
                                                       ranges=f"{done}/{total}"))


def run_spark_with_progress(spark, job: BackfillJob, range_plan: RangePlan, console: Console) -> BackfillReport:
    from spark_bridge.backfill import run_backfill

    return _with_progress(range_plan, console, False,
                          lambda on_progress: run_backfill(spark, job, range_plan, on_progress=on_progress))


def run_local_with_progress(job: BackfillJob, range_plan: RangePlan, console: Console) -> BackfillReport:
    from spark_bridge.local_engine import run_local

    return _with_progress(range_plan, console, True,
                          lambda on_progress: run_local(job, range_plan, on_progress=on_progress))


# Values no message may show: the sink password, a Spark Connect URL's token.


def console_on(stream) -> Console:
    return Console(file=stream, highlight=False, width=None if stream.isatty() else 250)


def plan_table(range_plan: RangePlan) -> Table:
    table = _table(["TOPIC", "PARTITION", "FROM", "UNTIL", "OFFSETS"])
    for r in range_plan.ranges:
        table.add_row(r.topic, str(r.partition), str(r.from_offset), str(r.until_offset), str(r.size))
    return table


def report_table(report: BackfillReport) -> Table:
    table = _table(["TOPIC", "PARTITION", "FROM", "UNTIL", "RECORDS", "STATEMENTS", "SECONDS", "RECORDS/S",
                    "ATTEMPT", "OUTPUT"])
    for p in report.partitions:
        table.add_row(p.topic, str(p.partition), str(p.from_offset), str(p.until_offset), str(p.records),
                      str(p.statements), f"{p.seconds:.2f}", f"{p.rate:,.0f}", str(p.attempt), p.output or "-")
    table.add_row("total", "", "", "", str(report.records), str(report.statements), f"{report.seconds:.2f}",
                  f"{report.rate:,.0f}", "", "", style="bold")
    return table


def _table(columns) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in columns:
        table.add_column(column, no_wrap=True)
    return table


def report_json(report: BackfillReport, job: BackfillJob, choice: EngineChoice | None, master: str | None,
                remote: str | None, session_seconds: float) -> dict:
    return {
        "job": {"topics": list(job.topics), "from": _describe(job.start), "until": _describe(job.until),
                "transform": job.transform, "sink": job.sink, "batch_size": job.batch_size,
                "writers": job.writers, "min_partitions": job.min_partitions, "group_id": job.group_id,
                "resume_offsets": None if job.resume_offsets is None else
                {f"{t}:{p}": o for (t, p), o in sorted(job.resume_offsets.items())}},
        "engine": choice.to_dict() if choice is not None else None,
        "spark": {"master": master, "remote": shown_remote(remote) if remote else None,
                  "session_start_seconds": round(session_seconds, 3)},
        "plan": [r.to_dict() for r in report.plan.ranges],
        **report.to_dict(),
    }


def partition_offsets(offsets, shown: int = 8) -> str:
    items = [f"{t}:{p}={o}" for (t, p), o in sorted(offsets.items())]
    more = f" and {len(items) - shown} more (all in --report)" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def _describe(spec) -> Any:
    parts = {f"{t}:{p}": target.describe() for (t, p), target in spec.partitions.items()}
    parts.update({t: target.describe() for t, target in spec.topics.items()})
    if spec.default is not None:
        return spec.default.describe() if not parts else {"*": spec.default.describe(), **parts}
    return parts
