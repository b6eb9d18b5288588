"""The hand-off to a registered stream: its resume point, read beside the host that runs it.

A backfill of a registered stream (`mgstreams backfill --stream NAME`, or the
data source's `stream` option) means by `committed` the offset where the live
stream resumes if started now (`stream_registry.resume_point`): a pending offset
change, else for an exactly-once stream the offset its sink stores, else the
group's committed offset, else auto.offset.reset. Everything is read, nothing
written: the host's state directory (sqlite in WAL mode: a running host is fine,
and its lock is never taken), the sink's stored offsets, the group's offsets.
"""
from __future__ import annotations

import os

from stream_registry.config import Delivery, StreamConfig
from stream_registry.errors import StreamError
from stream_registry.graph.sinks.stored_offsets import read_stored_offsets
from stream_registry.kafka.queries import PartitionQuery
from stream_registry.model import PartitionKey
from stream_registry.offset_spec import Committed, OffsetSpec, Shift
from stream_registry.redaction import redact
from stream_registry.registry.state_store import StateStore
from stream_registry.resume_point import resume_offsets


def uses_committed(*specs: OffsetSpec) -> bool:
    """Whether resolving these specs needs committed offsets (`committed`, or a shift relative to it)."""
    return any(isinstance(target, (Committed, Shift))
               for spec in specs for target in (spec.default, *spec.topics.values(), *spec.partitions.values()))


def stream_resume_offsets(state_dir: str | os.PathLike, config: StreamConfig,
                          timeout: float = 10.0) -> dict[PartitionKey, int]:
    """The resume point of every partition of the stream `config` describes, hosted in `state_dir`.

    Raises StreamError when it cannot be known: the cluster or the state cannot
    be read, or an exactly-once stream's sink cannot be read (a guess would skip
    or repeat offsets, which is what the hand-off is for).
    """
    store = StateStore(state_dir)
    try:
        pending = store.pending(config.name)
    finally:
        store.close()
    secrets = config.secret_values()
    with PartitionQuery(config.bootstrap.text, config.group_id, config.kafka_settings(),
                        timeout=timeout, secrets=secrets) as query:
        partitions = query.partitions(config.topics)
        snapshots = query.snapshots([PartitionKey(t, p) for t in config.topics for p in partitions[t]])
    stored: dict[PartitionKey, int] = {}
    unpending = [PartitionKey(s.topic, s.partition) for s in snapshots if (s.topic, s.partition) not in pending]
    if config.delivery == Delivery.EXACTLY_ONCE and unpending:
        try:
            # No output policy: the host admitted this sink when the stream was created, reading it writes
            # nothing, and whoever reads the state directory holds the stream's secrets already.
            found = read_stored_offsets(config.sink, config.name, config.sink_credentials(), None, unpending)
            stored = {PartitionKey(*tp): offset for tp, offset in found.items()}
        except StreamError as exc:
            raise StreamError(f"stream {config.name!r}: sink: its stored offsets are the exactly-once stream's "
                              f"resume point and cannot be read: {redact(str(exc), secrets)}") from None
    resume = resume_offsets(config, snapshots, pending, stored)
    # Every value is an offset: `stored` was read, and a partition with none resumes at auto.offset.reset's.
    unknown = sorted(f"{t}:{p}" for (t, p), offset in resume.items() if offset is None)
    if unknown:
        raise StreamError(f"stream {config.name!r}: no resume point for {', '.join(unknown)}")
    return {tp: offset for tp, offset in resume.items() if offset is not None}
