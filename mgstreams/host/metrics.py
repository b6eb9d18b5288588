"""Prometheus metrics of a host, read from its registry at scrape time.

A first set (stream up and status, its process's memory and restarts); lag
and throughput metrics in kafka-lag-exporter's names come with the
observability work.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from stream_registry import StreamRegistry, StreamStatus


class RegistryCollector(Collector):
    def __init__(self, registry: StreamRegistry):
        self._registry = registry

    def collect(self):
        up = GaugeMetricFamily("mgstreams_stream_up", "1 when the stream's consumer runs, else 0", labels=["stream"])
        status = GaugeMetricFamily("mgstreams_stream_status", "1 for the stream's current status",
                                   labels=["stream", "status"])
        rss = GaugeMetricFamily("mgstreams_stream_resident_memory_bytes",
                                "Resident memory of the stream's process, while it runs", labels=["stream"])
        restarts = GaugeMetricFamily("mgstreams_stream_restarts",
                                     "Restarts after the stream's process died, since it was last started",
                                     labels=["stream"])
        for info in self._registry.list():
            up.add_metric([info.name], 1.0 if info.status == StreamStatus.RUNNING else 0.0)
            status.add_metric([info.name, info.status.value], 1.0)
            restarts.add_metric([info.name], float(info.restarts))
            if info.rss_bytes is not None:
                rss.add_metric([info.name], float(info.rss_bytes))
        yield from (up, status, rss, restarts)


def registry_metrics(registry: StreamRegistry) -> CollectorRegistry:
    metrics = CollectorRegistry(auto_describe=False)
    metrics.register(RegistryCollector(registry))
    return metrics
