"""The Spark engine of `mgstreams serve`: streams with `engine: spark` run as Structured Streaming queries
(spark_bridge.spark_runner) when pyspark is importable; without it such a stream is refused at create, naming why.

A session is made when a Spark stream first starts, never at serve: a local one (`spark.master`, default
local[*]) in the host's process, shared by every local Spark stream of the host (one SparkContext per process:
the first stream's master is the one it runs with), or one per Spark Connect URL (`spark.remote`, parsed and
checked against the host allowlist again here: the value checked is the value used). Each stream's checkpoint
and control directory live under <state dir>/spark/<name>/.
"""
from __future__ import annotations

import atexit
import importlib.util
import threading
from pathlib import Path

from stream_registry.config import StreamConfig
from stream_registry.registry.runners.engine import Engine
from stream_registry.stream_engine import DEFAULT_MASTER, SPARK, check_remote

NO_PYSPARK = "pyspark is not installed here: install the spark extra (pip install 'mgstreams[spark]')"


def spark_engines(state_dir: str | Path) -> tuple[dict[str, Engine], dict[str, str]]:
    """(engines, unavailable engines and why) for the host's StreamRegistry."""
    if importlib.util.find_spec("pyspark") is None:
        return {}, {SPARK: NO_PYSPARK}
    from spark_bridge.spark_runner import spark_engine_of

    sessions = _Sessions()
    return {SPARK: spark_engine_of(sessions.of, Path(state_dir) / "spark", state_dir)}, {}


class _Sessions:
    """Sessions by where they run, made once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made: dict[str, object] = {}

    def of(self, config: StreamConfig):
        from spark_bridge.spark_session import build_connect_session, build_session

        remote = check_remote(config.spark_remote) if config.spark_remote is not None else None
        key = remote or "local"
        with self._lock:
            if key not in self._made:
                if remote:
                    session = build_connect_session(remote, app_name="mgstreams-streams")
                    atexit.register(_close_client, session)   # runs before the client's own (atexit is LIFO)
                else:
                    session = build_session(master=config.spark_master or DEFAULT_MASTER, app_name="mgstreams-streams")
                self._made[key] = session
            return self._made[key]


def _close_client(session) -> None:
    """At the host's exit: close a Spark Connect session's channel (ending any call still waiting on it), so that
    the client's own exit hook, which asks the server to clean its ML cache (retried for minutes when the server
    does not answer), finds it closed and asks nothing: a host never waits at exit for a Connect server that is
    down or not answering."""
    client = getattr(session, "client", None)
    try:
        if client is not None and not client.is_closed:
            client.close()
    except Exception:   # noqa: BLE001  (exiting anyway)
        pass
