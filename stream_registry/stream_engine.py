"""`engine` on a stream: what runs it, `host` (the host's own consumer processes, the default) or `spark` (a
Structured Streaming query, spark_bridge.spark_runner), and where a Spark stream's query runs.

A Spark stream names at most one of `spark.remote` (a Spark Connect server, `sc://host:port`, its host under the
operator's host allowlist as every address a caller gives is) and `spark.master` (a classic session the host
starts in its own process: `local`, `local[N]` or `local[*]`, nothing else); neither is `local[*]`. The URL is
refused with parameters after `;` (a token there would be shown with the stream). A Spark stream has one task:
its parallelism is the query's, one Spark task per Kafka partition.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

from .addresses import authority, clean_text, escaped
from .allowlists import check_host
from .errors import ConfigError

HOST = "host"
SPARK = "spark"
ENGINES = (HOST, SPARK)
DEFAULT_MASTER = "local[*]"
_LOCAL = re.compile(r"local(\[(\d+|\*)\])?\Z")


def check_engine(engine: object, remote: object, master: object, tasks: object) -> None:
    """ConfigError naming the field and its value unless the engine and its place make a stream this host runs."""
    if engine not in ENGINES:
        raise ConfigError(f"engine: expected one of {', '.join(repr(e) for e in ENGINES)}, got {escaped(engine)}")
    if engine == HOST:
        for field, value in (("spark.remote", remote), ("spark.master", master)):
            if value is not None:
                raise ConfigError(f"{field}: {escaped(value)} is only for a stream with engine 'spark' "
                                  f"(this one has engine 'host')")
        return
    if remote is not None and master is not None:
        raise ConfigError(f"spark.remote: give spark.remote (Spark Connect) or spark.master (a local session), "
                          f"not both (got {escaped(remote)} and {escaped(master)})")
    if remote is not None:
        check_remote(remote)
    if master is not None and (not isinstance(master, str) or not _LOCAL.match(master)):
        raise ConfigError(f"spark.master: expected local, local[N] or local[*] (a session in the host's process; "
                          f"a cluster is reached through spark.remote), got {escaped(master)}")
    if tasks != 1:
        raise ConfigError(f"tasks: a stream with engine 'spark' runs as one query (one Spark task per Kafka "
                          f"partition), so tasks must be 1, got {escaped(tasks)}")


def check_remote(remote: object) -> str:
    """`sc://host[:port]` with an allowed host, as parsed (the form the client is given); ConfigError naming spark.remote and the value otherwise."""
    text = clean_text("spark.remote", remote, "Spark Connect URL")
    match = re.match(r"sc://([^/;]*)/?\Z", text)
    if match is None or "@" in match.group(1) or any(c in text for c in ",?#"):
        raise ConfigError(f"spark.remote: expected sc://host:port (a Spark Connect server, no user-info, path or "
                          f";parameters: a token there would be shown with the stream), got "
                          f"{escaped(re.sub(r';.*', ';…', text))}")
    host, port = authority("spark.remote", match.group(1), text)
    check_host("spark.remote", host)
    return f"sc://{host.text}{f':{port}' if port is not None else ''}"


def spark_line(spark: Mapping) -> str:
    """Where a Spark stream's query stands (StreamInfo.spark), one line for describe, top and /ui:
    `spark query 1f0c…, batch 12, input 410 rows/s, processed 395 rows/s, batch 920 ms`."""
    if not spark.get("query_id"):
        return f"spark {spark.get('remote') or spark.get('master')}, no query"

    def rate(key: str) -> str:
        value = spark.get(key)
        return "-" if value is None else f"{value:.0f}"
    return (f"spark query {spark['query_id']}, batch {spark.get('last_batch_id')}, input "
            f"{rate('input_rows_per_second')} rows/s, processed {rate('processed_rows_per_second')} rows/s, batch "
            f"{rate('batch_duration_ms')} ms")
