"""What a stream's lag round says when the truth includes something that went wrong (issue 32).

- Its cluster cannot be reached (its running consumer found no broker
  answering, or two rounds in a row could not sample it): the verdict is ERR (Burrow's group error status), `cluster_up` is False, the
  records/s fall to 0 (nothing is being consumed that anyone can see), and the
  message says since when; lag is not known (None), the last round's lag kept
  beside it (`last_known_*`, with when and how long ago). It clears with the
  first round that reaches the cluster again.
- Records left the log before the stream read them and no operator has
  acknowledged them yet (`acknowledge_loss`): ERR, naming how many.
"""
from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from ..errors import KafkaOperationError, StreamError
from ..model import PartitionOffsets, StreamInfo, StreamLag, Verdict
from .verdict import StreamVerdict

# A round's query failing with one of these found the cluster away: its other streams are not asked again this round
UNREACHABLE_CODES = frozenset({"_TRANSPORT", "_ALL_BROKERS_DOWN", "_TIMED_OUT", "_RESOLVE"})


def unsampled(t: Any, info: StreamInfo, exc: StreamError, now: float, interval: float) -> StreamLag:
    """The stream's StreamLag for a round that could not sample it (`t`: the collector's record of the stream,
    whose `unreachable_since` this starts)."""
    repeated = t.unreachable_since is not None
    since_consumer = info.cluster_unreachable_since.timestamp() if info.cluster_unreachable_since else now
    t.unreachable_since = t.unreachable_since or min(since_consumer, now)
    since = _time(t.unreachable_since)
    previous: StreamLag | None = t.latest
    if previous is not None and not repeated and info.cluster_unreachable_since is None:
        # One round that could not sample (a query that timed out once on a loaded machine is no outage): said
        # in `error`; the verdict says ERR from the next such round on, or at once when the consumer confirmed it.
        return dataclasses.replace(previous, stream_status=info.status, error=f"lag: cannot sample since {since}: "
                                   f"{exc}", dead_lettered=info.dead_lettered, skipped=info.skipped)
    base = previous if previous is not None else StreamLag(
        name=info.name, consumer_group=info.consumer_group, stream_status=info.status, status=Verdict.ERR,
        message="", total_lag=None, max_lag=None, max_lag_seconds=None, records_per_second=0.0, sampled_at=None,
        interval_s=interval)
    away = isinstance(exc, KafkaOperationError) and exc.code in UNREACHABLE_CODES
    why = "the stream's cluster cannot be reached" if away else "its lag cannot be sampled"
    at = f" at {_time(base.sampled_at.timestamp())}" if base.sampled_at is not None else ""
    # every partition row carries the outage: its lag is not known; the last known one is kept beside it
    partitions = tuple(dataclasses.replace(
        p, lag=None, lag_seconds=None, status=Verdict.ERR, alarm=True, change_id=None,
        last_known_lag=_last(p.lag, p.last_known_lag), last_known_at=base.sampled_at,
        message=f"not known: {why} since {since}; last known{at}: lag {_last(p.lag, p.last_known_lag)}, "
                f"committed {p.committed_offset}")
        for p in base.partitions)
    return dataclasses.replace(
        base, stream_status=info.status, status=Verdict.ERR, records_per_second=0.0, cluster_up=not away,
        partitions=partitions, total_lag=None, max_lag=None, max_lag_seconds=None,
        last_known_total_lag=_last(base.total_lag, base.last_known_total_lag),
        last_known_max_lag=_last(base.max_lag, base.last_known_max_lag), last_known_at=base.sampled_at,
        message=(f"the stream's cluster cannot be reached since {since}" if away else
                 f"its lag cannot be sampled since {since}") + ": lag and offsets are not known"
        + ("" if base.sampled_at is not None else "; not sampled yet"),   # how old what is shown is
        offset_changes=t.changes_total or 0, dead_lettered=info.dead_lettered, error=f"lag: cannot sample since "
        f"{since}: {exc}", skipped=info.skipped, records_lost=info.records_lost,
        records_lost_unacknowledged=info.records_lost_unacknowledged)


def _last(now: int | None, before: int | None) -> int | None:
    """The last known value: this round's if it had one, else the one kept from before."""
    return now if now is not None else before


def aged(lag: StreamLag, now: float) -> StreamLag:
    """`lag` as read at `now`: how old its sample is (`age_s`) and, while its lag is not known, how old the last
    known one is, per stream and per partition."""
    if lag.sampled_at is None:
        return lag
    age = round(max(now - lag.sampled_at.timestamp(), 0.0), 3)
    if lag.last_known_at is None:
        return dataclasses.replace(lag, age_s=age)
    return dataclasses.replace(lag, age_s=age, last_known_age_s=age, partitions=tuple(
        dataclasses.replace(p, last_known_age_s=age) for p in lag.partitions))


def last_known_offsets(lag: StreamLag | None, now: float) -> list[PartitionOffsets] | None:
    """describe's rows from the last round while the stream's cluster cannot be reached (None otherwise): an
    answer at once, each row saying of when it is (lag not known, the last known beside it), rather than a query
    that waits for its timeout and fails."""
    if lag is None or lag.cluster_up or lag.sampled_at is None:
        return None
    lag = aged(lag, now)
    return [PartitionOffsets(topic=p.topic, partition=p.partition, committed_offset=p.committed_offset, position=None,
                             log_start_offset=p.log_start_offset, log_end_offset=p.log_end_offset, lag=None,
                             assigned=p.assigned, last_known_lag=p.last_known_lag, last_known_at=p.last_known_at,
                             last_known_age_s=p.last_known_age_s) for p in lag.partitions]


def consumer_outage(info: StreamInfo) -> KafkaOperationError | None:
    """The stream's own consumer found no broker answering (a probe confirmed it): the round need not wait for its
    queries to time out to say so."""
    if info.cluster_unreachable_since is None:
        return None
    return KafkaOperationError(f"the stream's consumer finds no broker answering since "
                               f"{_time(info.cluster_unreachable_since.timestamp())}", code="_ALL_BROKERS_DOWN")


def loss_verdict(info: StreamInfo) -> StreamVerdict | None:
    """ERR while records the stream lost are not acknowledged; None otherwise."""
    if not info.records_lost_unacknowledged:
        return None
    return StreamVerdict(Verdict.ERR, f"{info.records_lost_unacknowledged} record(s) left the log before the stream "
                                      f"read them (see its history, status lost); once seen: mgstreams "
                                      f"acknowledge-loss {info.name}", alarm=True)


def counts(info: StreamInfo, registry: Any) -> dict[str, Any]:
    """The counts a round carries besides lag: set aside, pending changes, lost."""
    return {"skipped": info.skipped, "pending_changes": len(registry.pending(info.name)),
            "records_lost": info.records_lost, "records_lost_unacknowledged": info.records_lost_unacknowledged}


def _time(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
