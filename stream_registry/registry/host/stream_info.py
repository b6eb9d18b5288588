"""What `describe`/`list` show of a stream (model.StreamInfo), read from its entry, its runner and its rows."""
from __future__ import annotations

import time

from ...config import ErrorsTolerance
from ...model import ChangeStatus, StreamInfo, StreamStatus
from ...redaction import mask_all
from ...stream_engine import DEFAULT_MASTER, SPARK
from ..state.change_sets import ChangeSets
from ..state.state_store import StateStore
from .starting import restarting_detail, starting_detail
from .stream_table import StreamEntry


def info_of(stream: StreamEntry, store: StateStore, changes: ChangeSets) -> StreamInfo:
    c = stream.config
    runner = stream.running
    restarting = stream.restarting
    counts = store.status_counts(c.name) if c.errors_tolerance == ErrorsTolerance.ALL else {}
    return StreamInfo(name=c.name, topics=tuple(c.topics), consumer_group=c.group_id,
                      bootstrap_servers=c.bootstrap_servers, transform=c.transform, sink=c.sink,
                      status=StreamStatus.STARTING if restarting is not None else stream.status,
                      error="; ".join(e for e in (stream.error, changes.store_error(c.name)) if e) or None,
                      configs=c.shown_configs(), credentials=mask_all(c.credentials),
                      batch_size=c.batch_size, batch_interval_ms=c.batch_interval_ms, restart=c.restart.value,
                      pid=runner.pid if runner else None, rss_bytes=runner.rss_bytes() if runner else None,
                      restarts=stream.restarts + (runner.restarts if runner else 0), delivery=c.delivery.value,
                      errors_tolerance=c.errors_tolerance.value, dead_letter_topic=c.dead_letter_topic,
                      key_format=c.key_format, value_format=c.value_format,
                      schema_registry_url=c.schema_registry_url, transform_options=dict(c.transform_options),
                      dead_lettered=counts.get(ChangeStatus.DEAD_LETTERED, 0),
                      skipped=counts.get(ChangeStatus.SKIPPED, 0),
                      records=stream.stats.records, batches=stream.stats.batches,
                      batch_seconds_sum=stream.stats.seconds_sum,
                      batch_seconds_buckets=stream.stats.cumulative_buckets(),
                      detail=restarting_detail(restarting.pid) if restarting is not None else
                      _starting_detail(runner, c.configs, stream.started_at)
                      if stream.status == StreamStatus.STARTING and runner else None,
                      tasks=c.tasks, pids=tuple(runner.pids) if runner else (),
                      cluster_unreachable_since=stream.outage_since if runner else None,
                      engine=c.engine, spark=_spark_of(runner, c),
                      **changes.lost_counts(c.name))


def _starting_detail(runner, configs, started_at: float) -> str:
    """What a starting stream waits for: its runner's own word if it has one (a Spark stream's session and query),
    else its group's assignment."""
    own = getattr(runner, "starting_detail", None)
    said = own() if callable(own) else None
    return said or starting_detail(configs, time.monotonic() - started_at)


def _spark_of(runner, config) -> dict | None:
    """A Spark stream's query as its runner reports it (spark_bridge.stream_query.progress), and where it runs."""
    if config.engine != SPARK:
        return None
    progress = getattr(runner, "progress", None)
    return {"remote": config.spark_remote, "master": (config.spark_master or DEFAULT_MASTER) if config.spark_remote is None else None,
            **(progress() if callable(progress) else {})}
