"""Group timings fitted to the embedded cluster (librdkafka's mock cluster, `mgstreams kafka`), so that a stream
restarted there on defaults delivers again within seconds.

The mock cluster does not act on LeaveGroup for classic groups: a stream's consumer that closes cleanly stays a
member until its session times out, and the consumer of the stream's next run (a stop and start, an alter, a host
restart) waits for that: up to librdkafka's default session.timeout.ms, 45 s. Static membership
(group.instance.id, KIP-345) would let the new member take the old one's place, but the mock cluster never
assigns to the returning instance (measured: nothing within 60 s). So on that cluster only, known by the cluster
id librdkafka's mock gives itself (`mockCluster<hex>`), a stream that does not set them gets a 6 s session (a
broker's smallest by default, group.min.session.timeout.ms) and a 2 s heartbeat: a rejoin then waits about 5 s.
Real clusters keep librdkafka's defaults: there, a closing consumer leaves its group at once.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from .client import new_admin

log = logging.getLogger("mgstreams.kafka")

MOCK_CLUSTER_PREFIX = "mockCluster"
EMBEDDED_GROUP_TIMINGS = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 2000}
_LOOKUP_TIMEOUT_S = 2.0


def is_embedded_cluster(cluster_id: str | None) -> bool:
    return bool(cluster_id) and str(cluster_id).startswith(MOCK_CLUSTER_PREFIX)


def embedded_fit(client_config: Mapping[str, object], secrets: Iterable[str] = ()) -> dict[str, object]:
    """The group timings to add to a consumer of `client_config` (bootstrap servers and security settings):
    EMBEDDED_GROUP_TIMINGS when the cluster is the embedded one and the config sets neither, else {}. One
    metadata request; a cluster that does not answer within 2 s gets {} (the consumer reports it). A KIP-848 group
    (group.protocol=consumer) gets {}: its timings are the broker's, and the mock acts on its leaving at once."""
    if any(key in client_config for key in EMBEDDED_GROUP_TIMINGS) or \
            str(client_config.get("group.protocol", "classic")).lower() == "consumer":
        return {}
    try:
        admin = new_admin(client_config, secrets)
        cluster_id = admin.list_topics(timeout=_LOOKUP_TIMEOUT_S).cluster_id
    except Exception as exc:   # a config the consumer will refuse, naming it; a cluster that does not answer
        log.debug("embedded cluster lookup failed: %s", type(exc).__name__)
        return {}
    return dict(EMBEDDED_GROUP_TIMINGS) if is_embedded_cluster(cluster_id) else {}
