"""`GET /health`: what a liveness probe (and an operator's glance) learns without the token, in Kafka Connect's
KIP-1017 shape: `{"status": ..., "message": ...}`.

- `healthy`: the host serves and every running stream reaches its Kafka cluster (or is not sampled yet);
- `degraded`: the host serves, but the last lag round found the cluster of some running streams unreachable.
  Still 200: the host is alive and restarting it would not bring Kafka back (KIP-1017's 500 `unhealthy` would
  have a probe kill it). The streams' names stay behind the token (`/lag` says which); the count does not.
"""
from __future__ import annotations

from typing import Any

from stream_registry.lag.collector import LagCollector
from stream_registry.model import StreamStatus
from stream_registry.registry.registry import StreamRegistry

LIVE = (StreamStatus.RUNNING, StreamStatus.STARTING)


def health_of(registry: StreamRegistry, lag: LagCollector) -> dict[str, Any]:
    """The host's health from the last lag round (no Kafka call: it answers at once, whatever Kafka does)."""
    live = {info.name for info in registry.list() if info.status in LIVE}
    away = sorted(s.name for s in lag.latest() if s.name in live and not s.cluster_up)
    if away:
        return {"status": "degraded", "message": f"serving; {len(away)} of {len(live)} running stream(s) cannot "
                                                 f"reach their Kafka cluster (GET /lag with the token says which)"}
    return {"status": "healthy", "message": f"serving; {len(live)} running stream(s), none cut off from Kafka"}
