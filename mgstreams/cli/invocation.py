"""What the commands of one `mgstreams` invocation share: its host client, how a failure ends it, JSON output,
and the options several commands take."""
from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from stream_registry.errors import StreamError

from ..client import HostClient
from ..wire import to_json


def fail(message: str) -> NoReturn:
    """Exit status 1 with `mgstreams: error: MESSAGE` on one line of stderr."""
    click.echo(f"mgstreams: error: {' '.join(str(message).split())}", err=True)
    sys.exit(1)


def run(action: Callable[[], Any]) -> Any:
    """Run a host call; a StreamError becomes exit status 1 with its message on one line."""
    try:
        return action()
    except StreamError as exc:
        fail(str(exc))


def print_json(value: Any) -> None:
    click.echo(json.dumps(to_json(value, zulu=True), sort_keys=False))


def host_client() -> HostClient:
    """The host client of this invocation (its token as HostClient finds it), closed with the context."""
    root = click.get_current_context().find_root()
    if "client" not in root.obj:
        root.obj["client"] = HostClient(root.obj["url"], token=root.obj.get("token"))
        root.call_on_close(root.obj["client"].close)
    return root.obj["client"]


def finite(ctx, param, value: float | None) -> float | None:
    """FloatRange lets nan through (every comparison with it is false) and inf past an open top."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a number of seconds")
    return value


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")

bootstrap_option = click.option("--bootstrap", "bootstrap_servers", envvar="KAFKA_BOOTSTRAP_SERVERS",
                                required=True, show_envvar=True, metavar="HOST:PORT[,...]",
                                help="The cluster: what `mgstreams kafka` printed, or any Kafka's bootstrap servers.")
