"""Stream configurations for tests, built by keyword in one place (the tests used to have four builders).

`stream_config(kafka, topic)` is a stream of the session's cluster: a `memory://<name>` sink (the
`memory_sinks` fixture), the recording transformation, its own consumer group (one per stream name and
topic, so a restarted stream finds its commits) and short group timings (`FAST_REJOIN`, under `configs`).
Without `kafka` it is a bare, valid configuration whose address is never dialled: what validation tests vary.
`stream_body(kafka, topic)` is the same for the host's API: the JSON body of `POST /streams`.
A module with other defaults binds them with `functools.partial`.
"""
from __future__ import annotations

import uuid
from typing import Any

from stream_helpers import FAST_REJOIN

from stream_registry import StreamConfig
from stream_registry.model import RetryPolicy

TRANSFORM = "stream_helpers.offsets_transform"   # records each message's offset (support/stream_helpers.py)
MERGE = "stream_registry.builtin_transformations.merge_messages"   # the built-in default transformation
# a registry's retries for tests (the `registry` fixture): a failed batch is retried at once, a few times
FAST_RETRY = RetryPolicy(attempts=3, first_backoff_s=0.05, max_backoff_s=0.1)


def stream_config(kafka: Any = None, topic: str = "orders", sink: str | None = None, *, name: str = "orders",
                  transform: str = TRANSFORM, configs: dict | None = None, **fields: Any) -> StreamConfig:
    if kafka is None:
        base = {"name": name, "topics": [topic], "bootstrap_servers": "127.0.0.1:9092", "transform": transform,
                "sink": sink or "null://"}
        return StreamConfig(**{**base, **({"configs": configs} if configs is not None else {}), **fields})
    base = {"name": name, "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers, "transform": transform,
            "sink": sink or f"memory://{name}", "consumer_group": f"g_{name}_{topic}",
            "configs": {**FAST_REJOIN, **(configs or {})}}
    return StreamConfig(**{**base, **fields})


def stream_body(kafka: Any, topic: str, out: Any = None, *, name: str | None = "orders", group: str | None = "g",
                **fields: Any) -> dict:
    """The JSON body of `POST /streams` for a stream of the session's cluster: a cypherl sink writing to `out`
    when given; a consumer group of its own (`group` and a random suffix; None: none, the host's default); name
    None: a fresh one. `fields` add to or replace these."""
    body = {"name": name or f"s_{uuid.uuid4().hex[:8]}", "topics": [topic],
            "bootstrap_servers": kafka.bootstrap_servers}
    if out is not None:
        body["sink"] = f"cypherl://{out}"
    if group is not None:
        body["consumer_group"] = f"{group}_{uuid.uuid4().hex[:10]}"
    return {**body, **fields}
