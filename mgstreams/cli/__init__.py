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
    mgstreams backfill (--stream NAME | --topics T --bootstrap-servers B) --from SPEC --sink URI ...

Every command but `serve`, `kafka` and `backfill` talks to the host at $MGSTREAMS_URL
(default http://127.0.0.1:8765), sending $MGSTREAMS_TOKEN, else the content of
$MGSTREAMS_TOKEN_FILE, else (for a host on this machine) the token a host on the
default state directory generated, so an operator moves exactly the streams
Memgraph users see through `CALL streams.*`.
Exit status: 0 on success, 1 with a one-line reason on stderr otherwise, 2 on
usage errors.

One module a concept: streams (list, create, alter, start, stop, drop),
offsets (set-offset, history, revert, pending, offsets export, check), monitor
(describe, lag, top), serve, kafka and backfill; render prints, invocation holds
what the commands of one run share. This module is the root: its options and the
command tree.
"""
from __future__ import annotations

import click

from stream_registry.crash_stacks import print_stacks_on_crash
from stream_registry.kafka.garbage import collect_on_own_thread

from ..settings import DEFAULT_URL, TOKEN_ENV, TOKEN_FILE_ENV, URL_ENV
from . import backfill, kafka, monitor, offsets, serve, streams
from .usage import RootGroup


@click.group(cls=RootGroup, context_settings={"help_option_names": ["-h", "--help"]})
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


for _command in (*streams.COMMANDS, *offsets.COMMANDS, *monitor.COMMANDS, serve.serve, kafka.kafka,
                 backfill.backfill):
    cli.add_command(_command)


def main(argv: list[str] | None = None) -> None:
    """Console entry point `mgstreams` (and `python -m mgstreams`)."""
    collect_on_own_thread()   # never on a librdkafka thread: a client freed there aborts the host (kafka/garbage)
    print_stacks_on_crash()
    cli.main(args=argv, prog_name="mgstreams")
