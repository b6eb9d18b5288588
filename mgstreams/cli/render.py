"""What the CLI prints: its tables and status lines, as Kafka's own tools print them.

Key columns (identity, state, offsets, lag) are never dropped nor cut; long ones
give way; extra ones hide (`tables`). Piped, a table is as wide as its widest
row, so every value is whole.
"""
from __future__ import annotations

import datetime
import sys
from collections.abc import Iterable
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.text import Text

from stream_registry.model import OffsetChange, PartitionOffsets, StreamLag, Verdict
from stream_registry.stream_engine import spark_line

from .tables import Column, FittedTable, extra, key, long

PIPED_WIDTH = 1_000_000                   # piped tables are never cut: the console is wider than any row

STREAM_COLUMNS = (key("NAME"), key("STATUS"), key("TOPICS"), long("GROUP"), long("BOOTSTRAP-SERVERS"),
                  long("TRANSFORM"), long("SINK"), long("ERROR", fold=True))
DETAIL_COLUMN = long("DETAIL", fold=True)   # shown while a stream has one (what a `starting` stream waits for)
DESCRIBE_COLUMNS = (extra("GROUP"), key("TOPIC"), key("PARTITION"), key("CURRENT-OFFSET"), extra("POSITION"),
                    extra("LOG-START-OFFSET"), key("LOG-END-OFFSET"), key("LAG"), extra("ASSIGNED"), key("TASK"),
                    extra("STORED-OFFSET"), extra("RESUME-OFFSET"))
CHANGE_COLUMNS = (key("TOPIC"), key("PARTITION"), extra("PREVIOUS-OFFSET"), key("NEW-OFFSET"), key("STATUS"),
                  long("MESSAGE", fold=True))
HISTORY_COLUMNS = (key("CHANGE-ID"), key("CHANGED-AT"), key("TOPIC"), key("PARTITION"), extra("PREVIOUS-OFFSET"),
                   key("OFFSET"), key("STATUS"), long("MESSAGE", fold=True))
PENDING_COLUMNS = (key("TOPIC"), key("PARTITION"), key("OFFSET"), extra("PREVIOUS-OFFSET"), key("REQUESTED-AT"),
                   long("MESSAGE", fold=True))
CHECK_COLUMNS = (key("TOPIC"), key("PARTITION"), key("OFFSET"), long("QUERY", fold=True),
                 long("PARAMETERS", fold=True), long("ERROR", fold=True))
LAG_COLUMNS = (key("TOPIC"), key("PARTITION"), key("CURRENT-OFFSET"), extra("LOG-END-OFFSET"), key("LAG"),
               key("LAG-SECONDS"), extra("METHOD"), key("STATUS"), long("MESSAGE", fold=True))
TOP_COLUMNS = (key("#"), key("NAME"), key("STATE"), key("STATUS"), key("RECORDS/S"), key("LAG"), key("LAG-SECONDS"),
               extra("DEAD"), extra("SKIPPED"), extra("PENDING"), extra("LOST"), long("MESSAGE", fold=True))
# top's verdicts in colour, as Burrow's and kafka-lag-exporter's dashboards show them
VERDICT_STYLES = {Verdict.OK: "green", Verdict.STARTING: "cyan", Verdict.REWIND: "cyan", Verdict.WARN: "yellow",
                  Verdict.STALL: "red", Verdict.STOP: "red", Verdict.ERR: "bold red"}


def console() -> Console:
    """Tables on stdout: fitted to the terminal; piped, as wide as the widest row, so values are whole."""
    return Console(highlight=False, width=None if sys.stdout.isatty() else PIPED_WIDTH)


def show(renderable: Any) -> None:
    """Print a table (or a group of them) on stdout. Never cropped: key columns wider than the terminal make
    longer lines, which the terminal wraps, rather than a column cut off."""
    console().print(renderable, crop=False)


def table(columns: Iterable[str | Column], rows: Iterable[Iterable[Any]], title: str | None = None) -> FittedTable:
    """Plain aligned columns with upper-case headers, as Kafka's own tools print them (a bare header is a key
    column: never dropped nor cut)."""
    return FittedTable([key(c) if isinstance(c, str) else c for c in columns], rows, title)


def offsets_table(group: str, rows: Iterable[PartitionOffsets]) -> FittedTable:
    """describe() rows as `kafka-consumer-groups --describe` prints them; TASK is the index of the stream's task
    that holds the partition (`-` none). Rows of the last lag round (the cluster cannot be reached) show their
    lag as not known, with the last known value."""
    rows = list(rows)
    last = next((r for r in rows if r.last_known_at is not None), None)

    rendered = table(DESCRIBE_COLUMNS, (
        (group, r.topic, r.partition, r.committed_offset, r.position, r.log_start_offset, r.log_end_offset,
         lag_figure(r.lag, r.last_known_lag) if r.last_known_at is not None else r.lag, "yes" if r.assigned else "no",
         "-" if r.task is None else r.task, r.stored_offset, r.resume_offset) for r in rows))
    if last is not None and last.last_known_at is not None:
        age = last.last_known_age_s if last.last_known_age_s is not None else \
            (datetime.datetime.now(datetime.UTC) - last.last_known_at).total_seconds()
        rendered.title = (f"not known now: the stream's cluster cannot be reached; last known at "
                          f"{utc_text(last.last_known_at)} ({age:.0f} s ago)")
    return rendered


def changes_table(changes: Iterable[OffsetChange]) -> FittedTable:
    """set_offset() results, one row per partition."""
    return table(CHANGE_COLUMNS, (
        (c.topic, c.partition, c.previous_offset, c.offset, c.status.value, c.message) for c in changes))


def process_line(info) -> str:
    """`stream orders running, pid 4242, rss 61.3 MiB, restarts 0`: where the stream runs, below its offsets;
    with errors.tolerance 'all', also how many poison messages it dead-lettered and skipped."""
    where = f"pid {info.pid}, rss {info.rss_bytes / 2 ** 20:.1f} MiB" if info.pid and info.rss_bytes \
        else f"pid {info.pid}" if info.pid else "no process"
    if info.tasks > 1:   # `tasks 2, pids 4242 4243, rss ...`
        where = f"tasks {info.tasks}, " + where.replace(f"pid {info.pid}", "pids " + " ".join(map(str, info.pids))
                                                        if info.pids else "no process", 1)
    if info.engine == "spark":   # `spark query 1f0c…, batch 12, input 410 rows/s, processed 395 rows/s, batch 920 ms`
        where = spark_line(info.spark or {})
    poison = f", dead-lettered {info.dead_lettered}, skipped {info.skipped}" if info.errors_tolerance == "all" else ""
    if info.records_lost:
        poison += f", records lost {info.records_lost} ({info.records_lost_unacknowledged} not acknowledged)"
    return f"stream {info.name} {info.status.value}, {where}, restarts {info.restarts}{poison}" + \
        (f" ({info.error})" if info.error else "") + (f"; {info.detail}" if info.detail else "")


def utc_text(moment: datetime.datetime) -> str:
    """A moment in a table: UTC to the second (--json keeps the microseconds), as narrow as it is readable."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(value: float | None) -> str | None:
    return None if value is None else f"{value:.1f}"


def unknown(lag: StreamLag) -> bool:
    """The stream's lag is not known now (the last round could not sample it, or none has yet)."""
    return lag.total_lag is None


def lag_figure(value: int | None, last: int | None, age: float | None = None) -> str:
    """A lag; not known, `?`, with the last known value (and how long ago it was known) when there is one."""
    if value is not None:
        return str(value)
    if last is None:
        return "?"
    return f"? (last {last}" + (f", {age:.0f} s ago" if age is not None else "") + ")"


def lag_table(lag: StreamLag) -> Group:
    """A stream's partitions with their lag, lag seconds and verdict; the stream's verdict below."""
    gone = unknown(lag)   # the offsets are in each row's message then; the lag's last value is beside `?`
    return Group(table(LAG_COLUMNS, (
        (p.topic, p.partition, "?" if gone else p.committed_offset, "?" if gone else p.log_end_offset,
         lag_figure(p.lag, p.last_known_lag), "?" if gone else _seconds(p.lag_seconds), p.lag_seconds_method.value,
         Text(p.status.value, style=VERDICT_STYLES.get(p.status, "")), p.message)
        for p in lag.partitions)), Text(lag_line(lag)))


def lag_line(lag: StreamLag) -> str:
    """`stream orders running: WARN (orders:1: lag grew ...); total lag 340, max 12.5 s, 220.0 records/s`."""
    seconds = f", max {lag.max_lag_seconds:.1f} s" if lag.max_lag_seconds is not None else ""
    sampled = lag.sampled_at.astimezone(datetime.UTC).strftime("%H:%M:%SZ") if lag.sampled_at else "never"
    if lag.total_lag is not None:
        total = f"{lag.total_lag}{seconds}"
    elif lag.last_known_total_lag is not None:
        total = f"not known (last {lag.last_known_total_lag}, {lag.last_known_age_s or 0:.0f} s ago)"
    else:
        total = "not known"
    line = (f"stream {lag.name} {lag.stream_status.value}: {lag.status.value} ({lag.message}); total lag "
            f"{total}, {lag.records_per_second:.1f} records/s; sampled {sampled} "
            f"(every {lag.interval_s:g} s)")
    return line + (f"; {lag.error}" if lag.error else "")


def verdict_text(lag: StreamLag) -> Text:
    """The verdict in its colour; a quiet STOP (a stopped stream nothing waits for) is not red."""
    return Text(lag.status.value, style="dim" if lag.quiet else VERDICT_STYLES.get(lag.status, ""))


def top_table(streams: list[StreamLag], url: str, interval: float, error: str | None = None,
              opened: StreamLag | None = None, spark: dict | None = None) -> Group:
    """`mgstreams top`'s view: a title line, one row per stream (numbered: its key opens its partitions), a line
    per Spark stream's query (`spark`: StreamInfo.spark by name), the last error if any, and the opened stream's
    partitions."""
    at = datetime.datetime.now().strftime("%H:%M:%S")
    rows = [(str(i) if i < 10 else "", s.name, s.stream_status.value, verdict_text(s), f"{s.records_per_second:.1f}",
             lag_figure(s.total_lag, s.last_known_total_lag, s.last_known_age_s),
             "?" if unknown(s) else _seconds(s.max_lag_seconds) or "-",
             str(s.dead_lettered), str(s.skipped), str(s.pending_changes),
             f"{s.records_lost}" + (f"({s.records_lost_unacknowledged} new)" if s.records_lost_unacknowledged else ""),
             s.error or s.message) for i, s in enumerate(streams, 1)]
    keys = "1-9 opens a stream's partitions, 0 closes; " if streams else ""
    parts: list[RenderableType] = [Text(f"mgstreams top: {len(streams)} stream(s) at {url}, {at} (every {interval:g} s; "
                                        f"{keys}q quits)", style="bold"), table(TOP_COLUMNS, rows)]
    parts += [Text(f"{s.name}: {spark_line(spark[s.name])}") for s in streams if s.name in (spark or {})]
    if error:
        parts.append(Text(f"error: {error}"))
    if opened is not None:
        parts += [Text(f"\n{opened.name}: partitions", style="bold"), lag_table(opened)]
    return Group(*parts)
