"""create checks a Bolt sink as it checks the cluster: connect, handshake, log in; a refusal names the sink and why.

pymgclient holds the GIL through its network I/O, so in a stream host the check
runs in a process of its own: a sink host that never answers cannot freeze the
host, and the check ends within SINK_CHECK_TIMEOUT_S. A plain `bolt://` sink is
checked by bolt_probe.py, a script that imports only pymgclient (a few tens of
milliseconds); `bolt+s`/`bolt+ssc` (the certificate checks are mgstreams' own)
in a child that runs the sink's own connect, as a transformation's import does. `check_sink: false` (`mgstreams create --no-check-sink`)
skips it, for a Memgraph that is not up yet; the stream's start then fails,
naming why, if it still is not.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from ...config import StreamConfig
from ...errors import ConfigError, StreamError
from ...graph.sinks.bolt import BoltSettings, BoltSink
from ...graph.sinks.policy import OutputPolicy
from ...graph.sinks.schemes import open_sink, parse_sink_uri
from ...graph.sinks.uri import PASSWORD_KEY, USERNAME_KEY
from ...redaction import redact_error
from ..runners.one_shot import call_in_child
from ..runners.runner import Isolation

SINK_CHECK_TIMEOUT_S = 10.0
PROBE = Path(__file__).resolve().parents[2] / "graph" / "sinks" / "bolt_probe.py"
SKIP_HINT = "create it with check_sink false (mgstreams create --no-check-sink) if Memgraph is not up yet"


def check_sink(config: StreamConfig, isolation: Isolation, output: OutputPolicy) -> None:
    """ConfigError naming field `sink` unless a Bolt sink answers and logs the stream in; other sinks pass."""
    if not config.check_sink or not isinstance(parse_sink_uri(config.sink, output)[1], BoltSettings):
        return
    try:
        if isolation == Isolation.PROCESS and parse_sink_uri(config.sink, output)[1].scheme == "bolt":
            _probe(parse_sink_uri(config.sink, output)[1], config)
        elif isolation == Isolation.PROCESS:
            call_in_child(connect_and_close, config, output, timeout=SINK_CHECK_TIMEOUT_S,
                          what=f"sink: checking {config.sink!r}", secrets=config.secret_values())
        else:
            _within(lambda: connect_and_close(config, output), SINK_CHECK_TIMEOUT_S, config.sink)
    except StreamError as exc:
        reason = redact_error(str(exc), config.secret_values())
        raise ConfigError(f"sink: {config.sink!r} does not answer as a Bolt server ({reason}); {SKIP_HINT}") from None


def connect_and_close(config: StreamConfig, output: OutputPolicy) -> None:
    sink = open_sink(config.sink, config.sink_credentials(), output, bolt_unwind=config.bolt_unwind)
    if isinstance(sink, BoltSink):
        sink.check()


def _probe(settings: BoltSettings, config: StreamConfig) -> None:
    credentials = config.sink_credentials()
    request = {"host": settings.host, "port": settings.port, "username": credentials.get(USERNAME_KEY),
               "password": credentials.get(PASSWORD_KEY)}
    try:
        done = subprocess.run([sys.executable, str(PROBE)], input=json.dumps(request), capture_output=True,
                              text=True, timeout=SINK_CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise StreamError(f"no answer within {SINK_CHECK_TIMEOUT_S:g} s") from None
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else {}
    except ValueError:
        answer = {}
    if answer.get("ok") is not True:
        raise StreamError(answer.get("error") or f"the check's process ended with status {done.returncode}")


def _within(check, timeout: float, sink: str) -> None:
    failure: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            check()
        except BaseException as exc:  # handed to the caller
            failure.append(exc)
        finally:
            done.set()
    threading.Thread(target=run, name="mgstreams-sink-check", daemon=True).start()
    if not done.wait(timeout):
        raise StreamError(f"no answer within {timeout:g} s")
    if failure:
        raise failure[0]
