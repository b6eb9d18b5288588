"""Commands that move or read a stream's offsets: set-offset, history, revert, pending, offsets export, check."""
from __future__ import annotations

import json

import click

from stream_registry.errors import ConfigError
from stream_registry.model import MAX_CHECK_LIMIT, OffsetChange, StreamStatus
from stream_registry.offset_files import OffsetSource, export_offsets, offsets_spec, parse_offsets_file

from .invocation import fail, finite, host_client, json_option, print_json, run
from .render import CHECK_COLUMNS, HISTORY_COLUMNS, PENDING_COLUMNS, changes_table, show, table, utc_text
from .spec_argument import parse_spec_argument
from .usage import UsageCommand, UsageGroup

timeout_option = click.option("--timeout", type=click.FloatRange(min=0, min_open=True, max=3600), default=10.0,
                              show_default=True, callback=finite,
                              help="Seconds to wait for a running stream to apply the change.")
dry_run_option = click.option("--dry-run", is_flag=True, help="Show what would be set; change nothing.")


@click.command("set-offset", cls=UsageCommand, context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("spec", required=False)
@click.option("--from-file", "from_file", type=click.File("r", encoding="utf-8-sig"), default=None, metavar="FILE",
              help="Offsets per partition from FILE ('-' for stdin): 'topic,partition,offset' lines (as "
                   "`mgstreams offsets export` and kafka-consumer-groups --export write them) or rpk's "
                   "'TOPIC PARTITION OFFSET'. A file with any bad line applies nothing.")
@dry_run_option
@timeout_option
@json_option
def set_offset(name: str, spec: str | None, from_file, dry_run: bool, timeout: float, as_json: bool) -> None:
    """Set the offset of stream NAME on every partition SPEC (or the --from-file FILE) targets.

    \b
    SPEC: 10 | earliest | latest | committed | +N | -N (N >= 3; back 1 or 2 is '"-1"', '"-2"'; a bare
          -1 or -2, Memgraph's beginning and end, is refused here: say earliest or latest) |
          2024-05-01T12:00:00Z | -PT15M (a duration back from now) | '{"group": "other_group"}' |
          '{"topic": "earliest", "topic:0": 42, "topic:1": {"group": "g"}}'
    """
    if (spec is None) == (from_file is None):
        raise click.UsageError("give either SPEC or --from-file FILE" if spec is None
                               else "give SPEC or --from-file FILE, not both")
    value = run(lambda: parse_spec_argument(spec) if spec is not None else _offsets_file(from_file))
    changes = run(lambda: host_client().set_offset(name, value, timeout=timeout, dry_run=dry_run))
    _print_changes(changes, as_json)


def _offsets_file(file) -> dict[str, int]:
    try:
        text = file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--from-file: cannot read {file.name!r}: {exc}") from None
    return offsets_spec(parse_offsets_file(text, f"--from-file {file.name}"))


def _print_changes(changes: list[OffsetChange], as_json: bool) -> None:
    if as_json:
        print_json(changes)
        return
    show(changes_table(changes))


@click.command(cls=UsageCommand)
@click.argument("name")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the newest N changes.")
@json_option
def history(name: str, limit: int | None, as_json: bool) -> None:
    """Offset changes applied to stream NAME (and poison messages set aside), newest first (times in UTC).

    CHANGE-ID is what `mgstreams revert` takes."""
    entries = run(lambda: host_client().history(name, limit))
    if as_json:
        print_json(entries)
        return
    show(table(HISTORY_COLUMNS, (
        (h.change_id, utc_text(h.changed_at), h.topic, h.partition, h.previous_offset, h.offset, h.status.value,
         h.message or None) for h in entries)))


@click.command(cls=UsageCommand, context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("change_id", type=click.IntRange(min=1), metavar="CHANGE_ID")
@dry_run_option
@timeout_option
@click.option("--partition", "partitions", multiple=True,
              help="Revert only this partition of the change (a number, or TOPIC:PARTITION); repeatable.")
@json_option
def revert(name: str, change_id: int, dry_run: bool, timeout: float, partitions: tuple, as_json: bool) -> None:
    """Move every partition of history change CHANGE_ID of stream NAME back to its previous offset.

    Through the same gated path as set-offset; the history then shows the revert
    ("revert of change CHANGE_ID"). A previous offset the log no longer holds is
    clamped into [log start, log end], and the result says so."""
    chosen = [int(p) if p.isdigit() else p for p in partitions] or None
    _print_changes(run(lambda: host_client().revert(name, change_id, timeout=timeout, dry_run=dry_run,
                                                    partitions=chosen)), as_json)


@click.command(cls=UsageCommand)
@click.argument("name")
@click.option("--cancel", is_flag=True, help="Cancel them (a running stream forgets them too); prints what it cancelled.")
@json_option
def pending(name: str, cancel: bool, as_json: bool) -> None:
    """Offsets of stream NAME waiting for an assignment: the stream is stopped, or another member of its
    group holds the partition. They are applied when the group assigns the partition to the stream."""
    client = host_client()
    rows = run(lambda: client.cancel_pending(name) if cancel else client.pending(name))
    if as_json:
        print_json(rows)
        return
    show(table(PENDING_COLUMNS, (
        (r.topic, r.partition, r.offset, r.previous_offset, utc_text(r.requested_at), r.message) for r in rows)))
    if cancel:
        click.echo(f"cancelled {len(rows)} pending offset(s)", err=True)


@click.group(cls=UsageGroup)
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
    client = host_client()
    lines, notes = export_offsets(run(lambda: client.describe(name)), source)
    for note in notes:
        click.echo(f"mgstreams: {note}", err=True)
    if lines:
        click.echo("\n".join(lines))
        return
    info = run(lambda: client.get(name))   # nothing to export: say why, and exit 1 so a script notices
    if source == OffsetSource.POSITION.value and info.status != StreamStatus.RUNNING:
        fail(f"source: stream {name!r} is {info.status.value}: positions exist only while it runs; "
             f"use --source committed (the group's committed offsets)")
    fail(f"source: stream {name!r} has no {source} offset on any partition: nothing to export")


@click.command(cls=UsageCommand, context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("spec", required=False, default="committed")
@click.option("--limit", type=click.IntRange(min=1, max=MAX_CHECK_LIMIT), default=10, show_default=True,
              help="Records per partition.")
@json_option
def check(name: str, spec: str, limit: int, as_json: bool) -> None:
    """Preview stream NAME from SPEC (any set-offset spec; default: committed): the statements its
    transformation makes of up to --limit records per partition.

    Read without joining the stream's group and without committing; nothing is written anywhere."""
    rows = run(lambda: host_client().check(name, parse_spec_argument(spec), limit=limit))
    if as_json:
        print_json(rows)
        return
    show(table(CHECK_COLUMNS, (
        (r.topic, r.partition, r.offset, r.query, json.dumps(r.parameters, ensure_ascii=False) if not r.error
         else "", r.error or "") for r in rows)))


COMMANDS = (set_offset, history, revert, pending, offsets, check)
