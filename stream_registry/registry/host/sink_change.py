"""A sink change at an alter: the new sink continues where the stream stood, or where the alter says. A change of
cluster (bootstrap_servers) is one too: `from` says where the new cluster's partitions start.

An exactly-once stream resumes where its sink stores offsets; a new sink stores
none, so without more it would read every topic again from its log start into
the new sink, silently. Instead a sink change is an offset change like any
other (one change set, in the history): each partition's first write into the
new sink carries the offsets over.

- Without `from`: where the stream stood, read after its old runner stopped (so
  nothing it wrote since is lost or repeated): the offsets its old sink stores
  (exactly-once). A partition the old sink stores nothing of stood nowhere: the
  new sink starts it at the log start, as the old one would have. A partition
  with a pending offset change keeps that change (it applies to the new sink),
  and that change moves it from where the old sink stood (its pending row's
  previous offset is read again then: the history and a revert start there,
  never from the group's commit, which the new sink has nothing to do with).
- With `from` (any offset spec, parsed by the one parser, resolved as
  set_offset resolves it, against where the stream stands when the alter
  arrives): the new sink starts there, every partition the spec targets; a
  partition the spec leaves where it stands is carried over.

An at-least-once stream resumes from its group's commit whatever the sink is:
it carries nothing over, but takes `from` as a set_offset of the new sink.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...config import ALTER_OPTIONS, Delivery, StreamConfig
from ...errors import ConfigError, OffsetSpecError, StreamStateError
from ...model import PartitionKey, ResolvedOffset
from ...offset_spec import OffsetSpec, parse_offset_spec
from ...redaction import redact

[FROM] = ALTER_OPTIONS   # "from": the alter's option naming where a new sink starts (not a field of the config)


@dataclass(frozen=True)
class SinkChange:
    """What an alter's sink change asks: the note its history rows carry and where the new sink starts
    (`spec`; None: carried over)."""
    note: str
    spec: OffsetSpec | None
    shown: str | None   # the `from` as given, for messages
    cluster: bool = False   # a new cluster: `from` is resolved there, not against where the stream stands


def split_from(changes: Mapping[str, Any]) -> tuple[dict[str, Any], object]:
    """The alter's config changes, and its `from` (None when absent)."""
    if not isinstance(changes, Mapping):
        return changes, None   # type: ignore[return-value]   # StreamConfig.altered says what is wrong
    rest = {k: v for k, v in changes.items() if k != FROM}
    return rest, changes.get(FROM)


def new_cluster(before: StreamConfig, after: StreamConfig) -> bool:
    """The alter moves the stream to another cluster (another broker list, compared as parsed)."""
    return sorted(before.bootstrap.text.split(",")) != sorted(after.bootstrap.text.split(","))


def sink_change(before: StreamConfig, after: StreamConfig, start_from: object) -> SinkChange | None:
    """The sink or cluster change an alter makes (None: it changes neither and names no `from`); ConfigError for a
    `from` without one, a cluster change without one, or one the offset-spec parser refuses (naming `from`).

    A new cluster holds other partitions and logs: where they start is said, as `from` (the group's commits there
    are `committed`), resolved against the new cluster, and recorded in the history like any offset change."""
    if new_cluster(before, after):
        if start_from is None:
            raise ConfigError(f"from: a change of cluster ({before.bootstrap.text} -> {after.bootstrap.text}) is an "
                              f"offset change: say where the new cluster's partitions start (from: earliest, latest, "
                              f"committed = the group's offsets there, a time, ...)")
        try:
            spec = parse_offset_spec(start_from)
        except OffsetSpecError as exc:
            message = str(exc)
            raise OffsetSpecError(message if message.startswith("from") else f"from: {message}") from None
        return SinkChange(note=f"cluster change {before.bootstrap.text} -> {after.bootstrap.text}: the new cluster's "
                               f"partitions start from {start_from!r}", spec=spec, shown=repr(start_from),
                          cluster=True)
    if before.sink == after.sink:
        if start_from is not None:
            raise ConfigError(f"from: names where a new sink or cluster starts; give it with a `sink` or "
                              f"`bootstrap_servers` change (the sink stays "
                              f"{redact(after.sink, after.secret_values())!r}); to move the stream, set its offset")
        return None
    sink_spec: OffsetSpec | None = None
    if start_from is not None:
        try:
            sink_spec = parse_offset_spec(start_from)
        except OffsetSpecError as exc:
            message = str(exc)
            raise OffsetSpecError(message if message.startswith("from") else f"from: {message}") from None
    secrets = after.secret_values()
    note = (f"sink change {redact(before.sink, secrets)} -> {redact(after.sink, secrets)}: "
            + (f"the new sink starts from {start_from!r}" if sink_spec is not None
               else "the new sink continues where the stream stood"))
    return SinkChange(note=note, spec=sink_spec, shown=None if start_from is None else repr(start_from))


def chosen_starts(change: SinkChange, resolved: list[ResolvedOffset]) -> list[ResolvedOffset]:
    """A `from` spec resolved (positions.resolve): every partition it targets goes where it says; one it leaves
    where it stands (unchanged) is carried over at that offset, when it has one."""
    out = []
    for r in resolved:
        if r.unchanged and r.offset is None:
            continue
        message = r.message if not r.unchanged else f"{r.topic}:{r.partition}: carried over to the new sink"
        out.append(ResolvedOffset(topic=r.topic, partition=r.partition, previous_offset=r.previous_offset,
                                  offset=r.offset, clamped=r.clamped, message=message, onward=r.onward))
    return out


def carried_over(before: StreamConfig, partitions: list[PartitionKey],
                 stored: Callable[[StreamConfig, list[PartitionKey]], Mapping[PartitionKey, int] | None],
                 pending: Mapping[PartitionKey, int]) -> tuple[list[ResolvedOffset], dict[PartitionKey, int]]:
    """Where the stream stood, read after its old runner stopped: its old sink's stored offsets (exactly-once),
    carried over (the rows), and, for a partition with a pending change, where that change moves it from (the
    old sink's offset of it, when it stores one); nothing for an at-least-once stream (its group's commit stays
    the truth, for the new sink as for the old). StreamStateError when the old sink cannot be read (nothing is
    changed then)."""
    if before.delivery != Delivery.EXACTLY_ONCE:
        return [], {}
    found = stored(before, partitions) if partitions else {}
    if found is None:
        raise StreamStateError(f"sink: the offsets the stream's sink {redact(before.sink, before.secret_values())!r} "
                               f"stores could not be read, so where the new sink continues is unknown; nothing "
                               f"changed (see the host's log; or name where the new sink starts with `from`)")
    rows = [ResolvedOffset(topic=tp.topic, partition=tp.partition, previous_offset=offset, offset=offset,
                           clamped=False, message=f"{tp.topic}:{tp.partition}: carried over to the new sink")
            for tp, offset in sorted(found.items()) if tp not in pending]
    return rows, {tp: offset for tp, offset in found.items() if tp in pending}


def prepare(change: SinkChange, config: StreamConfig, query: Any, runner: Any, positions: Any,
            deadline: float) -> tuple[list[ResolvedOffset] | None, list[PartitionKey]]:
    """Before the alter takes the stream's lock (it asks the cluster): a `from` resolved against where the
    stream stands now (the new sink's starts, and no partitions), or, to carry over, (None, the stream's
    partitions)."""
    if change.spec is None:
        partitions = query.partitions(config.topics)
        return None, [PartitionKey(t, p) for t in config.topics for p in partitions[t]]
    resolved, _ = positions.resolve(config, query, None if change.cluster else runner, change.spec,
                                    f"from {change.shown}", deadline)
    return chosen_starts(change, resolved), []
