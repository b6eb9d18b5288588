"""create checks a Bolt sink as it checks the cluster: connect, handshake, log in; a refusal names the sink and why.

The check is the sink's own connect (the neo4j driver, TLS and pinning included), in a thread that the caller
waits for at most SINK_CHECK_TIMEOUT_S: the driver releases the GIL in its network I/O, so a sink host that never
answers cannot freeze the host. `check_sink: false` (`mgstreams create --no-check-sink`) skips it, for a Memgraph
that is not up yet; the stream's start then fails, naming why, if it still is not.
"""
from __future__ import annotations

import threading

from ...config import StreamConfig
from ...errors import ConfigError, StreamError
from ...graph.sinks.bolt import BoltSettings, BoltSink
from ...graph.sinks.policy import OutputPolicy
from ...graph.sinks.schemes import open_sink, parse_sink_uri
from ...redaction import redact_error
from ..runners.runner import Isolation

SINK_CHECK_TIMEOUT_S = 10.0
SKIP_HINT = "create it with check_sink false (mgstreams create --no-check-sink) if Memgraph is not up yet"


def check_sink(config: StreamConfig, isolation: Isolation, output: OutputPolicy) -> None:  # noqa: ARG001
    """ConfigError naming field `sink` unless a Bolt sink answers and logs the stream in; other sinks pass."""
    if not config.check_sink or not isinstance(parse_sink_uri(config.sink, output)[1], BoltSettings):
        return
    try:
        _within(lambda: connect_and_close(config, output), SINK_CHECK_TIMEOUT_S, config.sink)
    except StreamError as exc:
        reason = redact_error(str(exc), config.secret_values())
        raise ConfigError(f"sink: {config.sink!r} does not answer as a Bolt server ({reason}); {SKIP_HINT}") from None


def connect_and_close(config: StreamConfig, output: OutputPolicy) -> None:
    sink = open_sink(config.sink, config.sink_credentials(), output, bolt_unwind=config.bolt_unwind)
    if isinstance(sink, BoltSink):
        sink.check()


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
