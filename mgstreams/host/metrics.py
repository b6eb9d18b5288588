"""Prometheus metrics of a host, read at scrape time from its registry and its lag sampler's last round.

Lag metrics take kafka-lag-exporter's names, so its Grafana dashboards work on
an mgstreams host: per partition `kafka_consumergroup_group_offset`, `_lag`,
`_lag_seconds`, `kafka_partition_latest_offset`, `kafka_partition_earliest_offset`
(labels group, topic, partition, stream); per group `kafka_consumergroup_group_max_lag`,
`_max_lag_seconds`, `_sum_lag` (labels group, stream). A scrape asks Kafka
nothing: the values are the sampler's (every `serve --lag-sample-interval`);
`mgstreams_lag_sample_age_seconds` says how old they are. While a stream's lag
is not known (its cluster cannot be reached) its lag series are absent, as
kafka-lag-exporter drops a cluster's it cannot reach; `mgstreams_cluster_up` is 0.

mgstreams' own: `mgstreams_stream_up`, `mgstreams_stream_status` (one series
with the stream's status, `{status, stream}`, and one with its lag verdict,
`{stream, verdict}`), `mgstreams_stream_resident_memory_bytes`,
`mgstreams_stream_restarts`, `mgstreams_offset_changes_total`,
`mgstreams_dead_letter_records_total`, `mgstreams_skipped_records_total`, `mgstreams_records_total`,
`mgstreams_batches_total` and the `mgstreams_batch_seconds` histogram (batches
written since the host started, every run of the stream added up); `mgstreams_cluster_up`
(0 when the sampler's last round could not reach the stream's cluster),
`mgstreams_records_lost_total{stream, topic, partition}` (records that left the log
before the stream read them, klag-exporter's data-loss counters being the anchor) and
`mgstreams_records_lost_unacknowledged`.

A Spark stream (`engine: spark`) adds its query's progress: `mgstreams_spark_query_info{stream, query_id, run_id}`
(1), `mgstreams_spark_last_batch_id`, `mgstreams_spark_input_rows_per_second`,
`mgstreams_spark_processed_rows_per_second` and `mgstreams_spark_batch_duration_seconds` (labels stream), from the
query's last progress report.
"""
from __future__ import annotations

import time

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from stream_registry import StreamRegistry, StreamStatus
from stream_registry.lag.collector import LagCollector
from stream_registry.registry.stream.batch_stats import BATCH_SECONDS_BOUNDS

PARTITION_LABELS = ["group", "topic", "partition", "stream"]
GROUP_LABELS = ["group", "stream"]


class RegistryCollector(Collector):
    def __init__(self, registry: StreamRegistry, lag: LagCollector | None = None):
        self._registry = registry
        self._lag = lag

    def collect(self):
        up = GaugeMetricFamily("mgstreams_stream_up", "1 when the stream's consumer runs, else 0", labels=["stream"])
        status = GaugeMetricFamily("mgstreams_stream_status",
                                   "1 for the stream's current status ({status, stream}) and for its lag verdict "
                                   "({stream, verdict}: OK, STARTING, WARN, STALL, STOP, REWIND, ERR)",
                                   labels=["status", "stream"])
        rss = GaugeMetricFamily("mgstreams_stream_resident_memory_bytes",
                                "Resident memory of the stream's process, while it runs", labels=["stream"])
        restarts = GaugeMetricFamily("mgstreams_stream_restarts",
                                     "Restarts after the stream's process died, since it was last started",
                                     labels=["stream"])
        dead = CounterMetricFamily("mgstreams_dead_letter_records",
                                   "Messages the stream sent to its dead-letter topic", labels=["stream"])
        skipped = CounterMetricFamily("mgstreams_skipped_records",
                                      "Poison messages the stream skipped (errors.tolerance all, no dead-letter topic)",
                                      labels=["stream"])
        records = CounterMetricFamily("mgstreams_records", "Messages the stream wrote to its sink (committed)",
                                      labels=["stream"])
        batches = CounterMetricFamily("mgstreams_batches", "Batches the stream wrote to its sink", labels=["stream"])
        batch_seconds = HistogramMetricFamily("mgstreams_batch_seconds",
                                              "Seconds per batch: transform, write, commit", labels=["stream"])
        lost = CounterMetricFamily("mgstreams_records_lost",
                                   "Records that left the log (retention) before the stream read them",
                                   labels=["stream", "topic", "partition"])
        unseen = GaugeMetricFamily("mgstreams_records_lost_unacknowledged",
                                   "Of those, records no operator has acknowledged yet (mgstreams acknowledge-loss)",
                                   labels=["stream"])
        infos = self._registry.list()
        for info in infos:
            unseen.add_metric([info.name], float(info.records_lost_unacknowledged))
            for (topic, partition), count in (self._registry.records_lost(info.name).items()
                                              if info.records_lost else ()):
                lost.add_metric([info.name, topic, str(partition)], float(count))
            up.add_metric([info.name], 1.0 if info.status == StreamStatus.RUNNING else 0.0)
            status.add_metric([info.status.value, info.name], 1.0)
            restarts.add_metric([info.name], float(info.restarts))
            if info.rss_bytes is not None:
                rss.add_metric([info.name], float(info.rss_bytes))
            dead.add_metric([info.name], float(info.dead_lettered))
            skipped.add_metric([info.name], float(info.skipped))
            records.add_metric([info.name], float(info.records))
            batches.add_metric([info.name], float(info.batches))
            if info.batch_seconds_buckets:
                bounds = (*(repr(float(b)) for b in BATCH_SECONDS_BOUNDS), "+Inf")
                batch_seconds.add_metric([info.name], [(le, float(n)) for le, n in zip(
                    bounds, info.batch_seconds_buckets, strict=False)],
                                         info.batch_seconds_sum)
        yield from (up, *self._lag_metrics(status), rss, restarts, records, batches, batch_seconds, dead, skipped,
                    lost, unseen, *spark_metrics(infos))

    def _lag_metrics(self, status: GaugeMetricFamily):
        offset = GaugeMetricFamily("kafka_consumergroup_group_offset", "The group's committed offset of a partition",
                                   labels=PARTITION_LABELS)
        lag = GaugeMetricFamily("kafka_consumergroup_group_lag",
                                "Offsets between the group's committed offset and the log end", labels=PARTITION_LABELS)
        lag_seconds = GaugeMetricFamily("kafka_consumergroup_group_lag_seconds",
                                        "Age of the oldest unprocessed message, in seconds (from its timestamp, "
                                        "else extrapolated from the log end's progress)", labels=PARTITION_LABELS)
        max_lag = GaugeMetricFamily("kafka_consumergroup_group_max_lag", "The group's largest partition lag",
                                    labels=GROUP_LABELS)
        max_lag_seconds = GaugeMetricFamily("kafka_consumergroup_group_max_lag_seconds",
                                            "The group's largest partition lag in seconds", labels=GROUP_LABELS)
        sum_lag = GaugeMetricFamily("kafka_consumergroup_group_sum_lag", "The group's lag over all its partitions",
                                    labels=GROUP_LABELS)
        latest = GaugeMetricFamily("kafka_partition_latest_offset", "A partition's log end offset",
                                   labels=PARTITION_LABELS)
        earliest = GaugeMetricFamily("kafka_partition_earliest_offset", "A partition's log start offset",
                                     labels=PARTITION_LABELS)
        changes = CounterMetricFamily("mgstreams_offset_changes",
                                      "Offset changes applied to the stream (set_stream_offset), as its history "
                                      "records them", labels=["stream"])
        age = GaugeMetricFamily("mgstreams_lag_sample_age_seconds",
                                "Seconds since the lag sampler's last round of the stream (its lag metrics are "
                                "that old)", labels=["stream"])
        cluster_up = GaugeMetricFamily("mgstreams_cluster_up", "1 when the lag sampler's last round reached the "
                                       "stream's Kafka cluster, else 0", labels=["stream"])
        for s in self._lag.latest() if self._lag is not None else ():
            status.add_sample("mgstreams_stream_status", {"stream": s.name, "verdict": s.status.value}, 1.0)
            cluster_up.add_metric([s.name], 1.0 if s.cluster_up else 0.0)
            changes.add_metric([s.name], float(s.offset_changes))
            if s.sampled_at is None:
                continue
            age.add_metric([s.name], max(time.time() - s.sampled_at.timestamp(), 0.0))
            if s.total_lag is None or s.max_lag is None:   # not known now: no series (mgstreams_cluster_up says why)
                continue
            group = [s.consumer_group, s.name]
            max_lag.add_metric(group, float(s.max_lag))
            sum_lag.add_metric(group, float(s.total_lag))
            if s.max_lag_seconds is not None:
                max_lag_seconds.add_metric(group, float(s.max_lag_seconds))
            for p in s.partitions:
                labels = [s.consumer_group, p.topic, str(p.partition), s.name]
                if p.committed_offset is not None:
                    offset.add_metric(labels, float(p.committed_offset))
                if p.lag is not None:
                    lag.add_metric(labels, float(p.lag))
                if p.lag_seconds is not None:
                    lag_seconds.add_metric(labels, float(p.lag_seconds))
                latest.add_metric(labels, float(p.log_end_offset))
                earliest.add_metric(labels, float(p.log_start_offset))
        return (status, offset, lag, lag_seconds, max_lag, max_lag_seconds, sum_lag, latest, earliest, changes, age,
                cluster_up)



def spark_metrics(infos) -> tuple[GaugeMetricFamily, ...]:
    """A running Spark stream's query, from its last progress report (StreamInfo.spark)."""
    query = GaugeMetricFamily("mgstreams_spark_query_info", "1 for a Spark stream's running query (its id and run)",
                              labels=["stream", "query_id", "run_id"])
    batch = GaugeMetricFamily("mgstreams_spark_last_batch_id", "The id of the query's last micro-batch",
                              labels=["stream"])
    rates = {key: GaugeMetricFamily(f"mgstreams_spark_{key}", text, labels=["stream"]) for key, text in (
        ("input_rows_per_second", "Rows per second arriving in the query's last micro-batch"),
        ("processed_rows_per_second", "Rows per second the query's last micro-batch processed"))}
    duration = GaugeMetricFamily("mgstreams_spark_batch_duration_seconds",
                                 "Seconds the query's last micro-batch took (its trigger execution)", labels=["stream"])
    for info in infos:
        spark = info.spark or {}
        if not spark.get("query_id"):
            continue
        query.add_metric([info.name, spark["query_id"], spark.get("run_id") or ""], 1.0)
        if spark.get("last_batch_id") is not None:
            batch.add_metric([info.name], float(spark["last_batch_id"]))
        for key, family in rates.items():
            if spark.get(key) is not None:
                family.add_metric([info.name], float(spark[key]))
        if spark.get("batch_duration_ms") is not None:
            duration.add_metric([info.name], spark["batch_duration_ms"] / 1000.0)
    return (query, batch, *rates.values(), duration)


def registry_metrics(registry: StreamRegistry, lag: LagCollector | None = None) -> CollectorRegistry:
    metrics = CollectorRegistry(auto_describe=False)
    metrics.register(RegistryCollector(registry, lag))
    return metrics
