"""`mgstreams serve`: the stream host in the foreground (the host itself is `mgstreams.host`)."""
from __future__ import annotations

import sys

import click

from stream_registry.log_lines import one_line_logging
from stream_registry.log_repeats import collapse_all_repeats
from stream_registry.model import STOP_TIMEOUT_S

from ..host import serve as host
from ..secret_env import reexec_without_secrets
from ..settings import (
    DEFAULT_LISTEN,
    DEFAULT_SINK,
    DEFAULT_SINK_ENV,
    LOG_LEVEL_ENV,
    STATE_DIR_ENV,
    TOKEN_ENV,
    default_state_dir,
)
from ..tokens import read_token
from .invocation import finite, run
from .usage import UsageCommand


@click.command(cls=UsageCommand)
@click.option("--state-dir", type=click.Path(file_okay=False), envvar=STATE_DIR_ENV, default=None,
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
@click.option("--stop-timeout", type=click.FloatRange(min=0.1), default=STOP_TIMEOUT_S,
              show_default=True, metavar="SECONDS",
              help="How long a stream's process may take to finish its batch and commit when stopped; "
                   "then it is killed.")
@click.option("--lag-sample-interval", type=click.FloatRange(min=0.05, max=3600), callback=finite,
              default=host.DEFAULT_LAG_SAMPLE_INTERVAL_S, show_default=True, metavar="SECONDS",
              help="Seconds between samples of every stream's committed offsets and log ends "
                   "(lag verdicts, lag seconds, metrics).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
              envvar=LOG_LEVEL_ENV, default="info", show_default=True, show_envvar=True,
              help="The host's and its stream processes' log level (stderr). Repeated lines (librdkafka's, and "
                   "any warning or error) are collapsed to one per kind every 10 s, with a count.")
def serve(state_dir: str | None, listen: str, token_file: str | None, no_token: bool, default_sink: str | None,
          stop_timeout: float, lag_sample_interval: float, log_level: str) -> None:
    """Run the stream host: the registry, its streams and the control API, until SIGTERM or Ctrl-C.

    Each running stream runs in a process of its own. Streams that were running
    resume at once. A second host on the same state directory exits at once,
    naming the first.
    """
    reexec_without_secrets()   # returns only once no secret is in /proc/<this pid>/environ
    one_line_logging(log_level.upper(), "%(asctime)s %(levelname)s %(name)s: %(message)s")
    collapse_all_repeats()   # the host's: its stream processes do the same (stream_process.child_main)
    token = run(lambda: read_token(token_file))
    directory = state_dir or default_state_dir()

    def ready(line: str) -> None:
        click.echo(line)
        sys.stdout.flush()
    run(lambda: host.serve(directory, listen, token, default_sink, ready=ready, stop_timeout=stop_timeout,
                           lag_sample_interval=lag_sample_interval, no_token=no_token))
