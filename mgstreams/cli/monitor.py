"""Commands that watch streams: describe (offsets and lag per partition, --watch), lag, and top (a live view)."""
from __future__ import annotations

import datetime
import signal
import sys
import time
from collections.abc import Iterable

import click
from rich.live import Live

from stream_registry.errors import StreamError
from stream_registry.model import StreamLag

from .invocation import finite, host_client, json_option, print_json, run
from .keys import Keys
from .render import console, lag_table, offsets_table, process_line, show, top_table
from .tables import FittedTable
from .usage import UsageCommand


@click.command(cls=UsageCommand)
@click.argument("name")
@click.option("--watch", is_flag=True, help="Refresh until Ctrl-C.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=2.0, show_default=True, callback=finite,
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
            print_json(run(lambda: host_client().describe(name)))
        return
    if not watch:
        show(run(lambda: _describe_table(name)))
        return

    def frames() -> Iterable[FittedTable]:
        for _ in _refreshes(count, interval):
            rendered = run(lambda: _describe_table(name))
            rendered.title = f"{name} at {datetime.datetime.now().strftime('%H:%M:%S')} (every {interval:g} s)"
            yield rendered
    if not sys.stdout.isatty():   # piped or redirected: every frame, one after the other (a log of the watch)
        for rendered in frames():
            show(rendered)
            sys.stdout.flush()
        return
    with Live(console=console(), auto_refresh=False) as live:
        for rendered in frames():
            live.update(rendered, refresh=True)


def _describe_table(name: str) -> FittedTable:
    client = host_client()
    info = client.get(name)
    rendered = offsets_table(info.consumer_group, client.describe(name))
    rendered.caption = process_line(info)
    return rendered


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


@click.command(cls=UsageCommand)
@click.argument("name")
@json_option
def lag(name: str, as_json: bool) -> None:
    """Lag of stream NAME per partition: offsets, seconds, and Burrow's verdict (OK WARN STALL STOP REWIND)."""
    result = run(lambda: host_client().lag(name))
    if as_json:
        print_json(result)
        return
    show(lag_table(result))


@click.command(cls=UsageCommand)
@click.option("--interval", type=click.FloatRange(min=0.2, max=3600), default=1.0, show_default=True,
              callback=finite, help="Seconds between refreshes.")
@click.option("--once", is_flag=True, help="Print the view once and exit (no terminal needed).")
def top(interval: float, once: bool) -> None:
    """A live view of every stream: state, lag verdict (in colour), records/s, lag and lag seconds; a stream's
    number (1-9) opens its partitions below, 0 closes them; q quits."""
    client = host_client()
    if once:
        streams = run(client.lag_all)
        show(top_table(streams, client.url, interval, spark=run(lambda: spark_queries(client))))
        return
    streams: list[StreamLag] = []
    spark: dict = {}
    opened: str | None = None   # the stream whose partitions are shown (its number's key; 0 closes)

    def interrupt(*_):   # SIGTERM ends it like q: the terminal gets its settings back
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        with Keys() as keys, Live(console=console(), auto_refresh=False, transient=False) as live:
            while True:
                began = time.monotonic()
                error = None
                partitions = None
                try:
                    streams = client.lag_all()
                    partitions = next((s for s in streams if s.name == opened), None)
                    spark = spark_queries(client)
                except StreamError as exc:   # the host went away: say so, keep the last view, retry
                    error = " ".join(str(exc).split())
                live.update(top_table(streams, client.url, interval, error, partitions, spark), refresh=True)
                pressed = ""
                while (left := interval - (time.monotonic() - began)) > 0:
                    pressed += keys.wait(left)
                    if "q" in pressed.lower():
                        return
                    digits = [c for c in pressed if c.isdigit()]
                    if digits:   # a stream's number opens its partitions at once; 0 closes them
                        n = int(digits[-1])
                        opened = streams[n - 1].name if 0 < n <= len(streams) else None
                        break
    except KeyboardInterrupt:
        return
    finally:
        signal.signal(signal.SIGTERM, previous)


def spark_queries(client) -> dict:
    """The Spark streams' queries by stream name (GET /streams' `spark`): top shows each below its table."""
    return {i.name: i.spark for i in client.list() if i.engine == "spark" and i.spark}


COMMANDS = (describe, lag, top)
