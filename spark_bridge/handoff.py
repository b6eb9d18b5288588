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
from collections.abc import Mapping
from pathlib import Path

from stream_registry.config import Delivery, StreamConfig
from stream_registry.errors import StreamError
from stream_registry.graph.sinks.stored_offsets import read_stored_offsets
from stream_registry.kafka.queries import PartitionQuery
from stream_registry.model import ChangeStatus, PartitionKey
from stream_registry.offset_spec import Committed, OffsetSpec, Shift
from stream_registry.redaction import redact
from stream_registry.registry.state.state_store import STATE_FILE, StateStore
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


# -- the hand-off under a moving stream -----------------------------------------------------------------
# A backfill ends where the stream resumes, read when it starts. If the stream's offsets are moved while it runs
# (set_stream_offset, a revert, a sink change, a realignment to its sink), the live stream no longer resumes there:
# the hand-off would leave a gap or load offsets twice. It is not made exact after the fact; the backfill fails
# saying which change moved which partition and what that leaves (`check_unmoved`).
_MOVES = (ChangeStatus.APPLIED, ChangeStatus.CLAMPED, ChangeStatus.REALIGNED)


def offset_changes_mark(state_dir: str | os.PathLike, name: str) -> int:
    """The newest change id of stream `name` (history or pending; 0: none), read before its resume point; 0 where
    no state is (nothing is created: reading the stream's config says what is wrong)."""
    if not (Path(state_dir) / STATE_FILE).exists():
        return 0
    store = StateStore(state_dir)
    try:
        newest = store.history(name, 1)
        return max(store.last_change_id(name), (newest[0].change_id or 0) if newest else 0)
    finally:
        store.close()


def check_unmoved(state_dir: str | os.PathLike, name: str, mark: int, resume: Mapping[PartitionKey, int]) -> None:
    """StreamError when an offset change of stream `name` newer than `mark` (applied, or pending) moves a partition
    elsewhere than `resume` (where the backfill ended): the change, and the gap or the overlap it leaves."""
    store = StateStore(state_dir)
    try:
        moves = [(h.change_id, h.status.value, h.topic, h.partition, h.offset) for h in store.history(name)
                 if (h.change_id or 0) > mark and h.status in _MOVES]
        moves += [(p.change_id, "pending", p.topic, p.partition, p.offset) for p in store.pending_rows(name)
                  if (p.change_id or 0) > mark]
    finally:
        store.close()
    said = []
    for change_id, status, topic, partition, offset in sorted(moves, key=lambda m: m[0] or 0):
        end = resume.get(PartitionKey(topic, partition))
        if end is None or offset == end:
            continue
        what = (f"offsets {offset}..{end - 1} are loaded by the backfill and again by the stream" if offset < end
                else f"offsets {end}..{offset - 1} are loaded by neither (backfill them: --from "
                     f"'{{\"{topic}:{partition}\": {end}}}' --until '{{\"{topic}:{partition}\": {offset}}}')")
        said.append(f"change {change_id} ({status}) moved {topic}:{partition} to {offset}: {what}")
    if said:
        raise StreamError(f"stream {name!r}: its offsets were moved while the backfill ran, so the backfill's end "
                          f"(the stream's resume point when it started) is no longer where the live stream resumes; "
                          f"the backfill's writes stay: " + "; ".join(said))
