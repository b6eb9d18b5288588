"""The terminal's view of a run: a rich `Reporter` (tables, a progress bar, check marks) and the closing list
of what the demo wrote and how to load it into Memgraph."""
from __future__ import annotations

import contextlib
import json
import shutil
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.padding import Padding
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from spark_bridge.backfill import BackfillJob
from spark_bridge.range_plan import RangePlan
from stream_registry.graph.cypher_literals import to_cypher_literal

from ..cli.render import table
from .reporter import Reporter
from .results import BackfillResult, Check
from .settings import DemoSettings


def _indented(renderable) -> Padding:
    return Padding(renderable, (0, 0, 0, 3), expand=False)


def _cell(value: Any) -> str:
    """A result value as Memgraph's clients show it."""
    if value is None or isinstance(value, bool):
        return to_cypher_literal(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


class RichReporter(Reporter):
    def __init__(self, console):
        self.console = console
        self._progress = None
        self._task = None

    def say(self, text: str) -> None:
        self.console.print(f"   {text}", soft_wrap=True, markup=False)

    def step(self, number: int, title: str) -> None:
        self.console.print()
        self.console.print(f"[bold]{number} · {title}[/]")

    def call(self, statement: str) -> None:
        self.console.print(Text(f"   {statement};", style="cyan"), soft_wrap=True)

    def rows(self, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            self.console.print(_indented(table(rows[0].keys(), ([_cell(v) for v in r.values()] for r in rows))))

    def command(self, argv: Sequence[str], output: str) -> None:
        self.console.print(Text(f"   $ {' '.join(argv)}", style="cyan"), soft_wrap=True)
        for line in output.rstrip().splitlines():
            self.console.print(f"   {line.rstrip()}", soft_wrap=True, markup=False, highlight=False)

    def backfill_plan(self, job: BackfillJob, plan: RangePlan) -> None:
        self.say(f"replay offsets [{job.start.default.describe()}, committed) of group {job.group_id} through "
                 f"{job.transform} into {job.sink} (the stream's config read from its state dir)")
        self.say(f"plan: {len(plan.ranges)} ranges, one Spark task each, {plan.total_offsets:,} offsets")
        for note in plan.notes:
            self.say(f"  note: {note}")
        self._progress = Progress(TextColumn("   backfill"), BarColumn(bar_width=40), MofNCompleteColumn(),
                                  TextColumn("ranges"), TimeElapsedColumn(), console=self.console)
        self._task = self._progress.add_task("backfill", total=len(plan.ranges))
        self._progress.start()

    def backfill_progress(self, done: int, total: int) -> None:
        if self._progress is None:
            return
        if done < 0:
            self._progress.stop()
            self._progress = None
        else:
            self._progress.update(self._task, completed=done, total=total)

    def backfill(self, result: BackfillResult) -> None:
        self.backfill_progress(-1, -1)
        report = result.report
        self.console.print(_indented(table(
            ("RANGE", "RECORDS", "STATEMENTS", "BATCHES", "SECONDS", "RECORDS/S", "FILE"),
            ((p.range, p.records, p.statements, p.batches, f"{p.seconds:.2f}", f"{p.rate:,.0f}",
              shown_path(Path(p.output))) for p in report.partitions))))
        self.say(f"{report.records:,} records → {report.statements:,} statements in {report.seconds:.1f} s "
                 f"({report.rate:,.0f} records/s)")

    def check(self, check: Check) -> None:
        mark = {True: "[green]✓[/]", False: "[red]✗[/]", None: "[yellow]–[/]"}[check.ok]
        self.console.print(f"   {mark} [bold]{check.name}[/]: {escape(check.reason)}", soft_wrap=True)


def shown_path(path: Path) -> str:
    """Relative to the working directory when under it (./demo-out/...), else absolute."""
    with contextlib.suppress(ValueError):
        return "./" + str(Path(path).resolve().relative_to(Path.cwd()))
    return str(path)


def print_outputs(console, settings: DemoSettings) -> None:
    """Step 7: where everything is, and how to load it into Memgraph."""
    out = shown_path(settings.out_dir)
    rows = [(shown_path(settings.schema_path), "CREATE INDEX ON :Account(id): load it first")]
    if settings.bolt:
        rows.append((settings.memgraph_uri, "the live stream's writes (Bolt)"))
    else:
        rows.append((shown_path(settings.live_path),
                     f"{_lines(settings.live_path):,} statements from the live stream, in delivery order "
                     f"(the rewind redelivered some)"))
    files = sorted(settings.backfill_dir.glob("*.cypherl"))
    rows.append((shown_path(settings.backfill_dir) + "/",
                 f"{len(files)} files, one per offset range: {sum(_lines(f) for f in files):,} statements"))
    for path, what in ((settings.report_path, "the backfill report (per range: records, seconds, file)"),
                       (settings.state_dir, "the host's state (SQLite): the stream, offset history; "
                                            "`mgstreams serve --state-dir` it again"),
                       (settings.host_log, "the host's log"),
                       (settings.spark_log, "Spark's log")):
        if path.exists():
            rows.append((shown_path(path) + ("/" if path.is_dir() else ""), what))
    console.print(_indented(table(("PATH", "WHAT"), rows)))
    console.print()
    lines = ["Load it into Memgraph (mgconsole reads one statement per line on stdin):",
             f"  mgconsole < {out}/schema.cypherl"]
    if not settings.bolt:
        lines.append(f"  mgconsole < {out}/live.cypherl")
    lines += [f"  cat {out}/backfill/*.cypherl | mgconsole --import-mode=batched-parallel",
              "or into the docker-compose stack (Memgraph MAGE with the plugin):",
              "  docker compose up -d --build",
              f"  docker compose exec -T memgraph mgconsole < {out}/schema.cypherl",
              f"  docker compose exec -T memgraph mgconsole < {out}/live.cypherl",
              f"  cat {out}/backfill/*.cypherl | docker compose exec -T memgraph mgconsole "
              f"--import-mode=batched-parallel",
              "or let the live stream write there itself: MEMGRAPH_URI=bolt://localhost:7687 make demo",
              "Every statement MERGEs on account id and transfer_id: loading live and backfill both, "
              "or twice, gives the same graph."]
    for line in lines:
        console.print(f"   {line}", soft_wrap=True, highlight=False, markup=False)


def _lines(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip() and not line.startswith(b"//"))


def console_width() -> int:
    """Tables are never cut: at least 120 columns on a terminal, 200 when piped (like the CLI)."""
    if not sys.stdout.isatty():
        return 200
    return max(shutil.get_terminal_size().columns, 120)
