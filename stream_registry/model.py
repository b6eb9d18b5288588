"""The values mgstreams passes around: every one that crosses HTTP, a stream process's pipe or SQLite.

Frozen dataclasses built by keyword, str enums for states, and `PartitionKey`
for a (topic, partition) pair. Nothing here does I/O or imports another
mgstreams module: every layer (registry, lag, host, client, CLI) imports its
values from here, so none needs a module that does work just for its types.
The limits the API, the registry and the query module share live here too;
query_modules/streams.py (stdlib + mgp only) keeps copies that a test compares.

Why one module over 400 lines: the values are kept in one model module (the guide's rule, as confluent-kafka
keeps its `_model`), so any value is found in one place and no layer imports another's module for its types.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, NamedTuple


class PartitionKey(NamedTuple):
    """A (topic, partition) pair as a dict key or a set member. Named apart from confluent_kafka's
    TopicPartition (a mutable C object that also carries an offset); a plain tuple still compares equal."""
    topic: str
    partition: int


# -- limits: shared by the HTTP API, the client, the registry and (as copies) the query module ----------
REQUEST_TIMEOUT_S = 30.0     # a client's wait for any call but an offset change, an alter or a preview
ALTER_TIMEOUT_S = 150.0      # an alter may import a transformation and restart the stream: see the two below
MARGIN_S = 5.0               # beyond an offset change's (or preview's) own timeout: the host answers within it
DEFAULT_TIMEOUT_MS = 10_000  # an offset change waits this long for the rebalance unless told otherwise
MAX_TIMEOUT_MS = 3_600_000   # the longest offset change the host waits for (one hour)
MAX_CHECK_LIMIT = 1000       # records per partition a preview reads at most (they are all held in memory)
CHECK_TIMEOUT_MS = 20_000    # a preview reads and transforms within this (a Bolt worker waits meanwhile)
CHECK_IMPORT_TIMEOUT_S = 60.0  # importing a transformation's module at create or alter (a large ML library takes long)
STOP_TIMEOUT_S = 30.0        # a stream finishing its batch at stop before its process is killed
MAX_LIMIT = 2 ** 63 - 1      # the most history rows a `limit` may ask for
MAX_BODY_BYTES = 1 << 20     # an offset map for 50,000 partitions fits; a client cannot make the host hold more
SESSION_TIMEOUT_MS = 45_000        # librdkafka's default session.timeout.ms

INITIAL_REBALANCE_DELAY_S = 3      # brokers' (and the embedded cluster's) group.initial.rebalance.delay.ms


# -- states ------------------------------------------------------------------------------------------
class StreamStatus(StrEnum):
    CREATED = "created"
    STARTING = "starting"   # subscribed, the group has not assigned partitions yet
    RUNNING = "running"
    STOPPED = "stopped"
    ERROR = "error"


class ChangeStatus(StrEnum):
    PLANNED = "planned"    # dry run: what would be applied
    APPLIED = "applied"
    CLAMPED = "clamped"    # applied (or planned), moved into [log start, log end]
    PENDING = "pending"    # recorded; applied at the next assignment
    UNCHANGED = "unchanged"   # targeted, but keeps its offset ({"group": ...} that group never committed)
    SUPERSEDED = "superseded"  # a later call moved the partition before this one was applied
    CANCELLED = "cancelled"    # cancelled (cancel_pending) before it was applied
    ERROR = "error"
    # Not offset changes: a poison message set aside by errors.tolerance 'all' (history only)
    SKIPPED = "skipped"
    DEAD_LETTERED = "dead_lettered"
    # An exactly-once stream resumed elsewhere than where its group (or its own view) stood: the sink's stored
    # offsets decided (a sink cut back, edited, replaced, or holding none); not requested by anyone (history only)
    REALIGNED = "realigned"
    # Not an offset change: records that left the log before the stream read them (previous_offset: the first
    # of them, offset: where the stream went on), history only
    LOST = "lost"


class MoveState(StrEnum):
    REQUESTED = "requested"
    WAITING = "waiting"
    MOVED = "moved"
    PERSISTED = "persisted"
    RECORDED = "recorded"
    SUPERSEDED = "superseded"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self in (MoveState.RECORDED, MoveState.SUPERSEDED, MoveState.CANCELLED)


class Verdict(StrEnum):
    """Burrow's partition statuses, ordered by how bad they are (`severity`), and STARTING: too early to say."""
    OK = "OK"
    STARTING = "STARTING"
    REWIND = "REWIND"
    WARN = "WARN"
    STALL = "STALL"
    STOP = "STOP"
    ERR = "ERR"     # Burrow's group ERR: its cluster cannot be reached, or records left the log unread (until seen)

    @property
    def severity(self) -> int:
        return _SEVERITY[self]


_SEVERITY = {Verdict.OK: 0, Verdict.STARTING: 1, Verdict.REWIND: 2, Verdict.WARN: 3, Verdict.STALL: 4,
             Verdict.STOP: 5, Verdict.ERR: 6}


class LagSecondsMethod(StrEnum):
    TIMESTAMP = "timestamp"
    EXTRAPOLATED = "extrapolated"


# -- a stream ------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ExitOutcome:
    """What a stream process's death leads to (registry.restarts.RestartBackoff.after_exit)."""
    error: str                 # shown as the stream's (or its task's) error
    delay_s: float | None      # before the restart; None: not restarted
    failures: int              # the crash loop's count, for the next backoff


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How a failed batch is retried before the stream goes to ERROR (handed to each stream's process)."""
    attempts: int = 4
    first_backoff_s: float = 0.2
    max_backoff_s: float = 2.0

    def backoff(self, attempt: int) -> float:
        return min(self.first_backoff_s * (2 ** (attempt - 1)), self.max_backoff_s)

DEFAULT_RETRY = RetryPolicy()            # frozen: one instance serves every stream


@dataclass(frozen=True, kw_only=True)
class StreamInfo:
    """A snapshot for list()/get(): secrets in configs and credentials are masked."""
    name: str
    topics: tuple[str, ...]
    consumer_group: str
    bootstrap_servers: str
    transform: str
    sink: str
    status: StreamStatus
    error: str | None
    configs: Mapping[str, str]
    credentials: Mapping[str, str]
    batch_size: int
    batch_interval_ms: int
    restart: str = "on-failure"        # the stream's RestartPolicy, as text
    pid: int | None = None             # the process that runs the stream's consumer, while it runs
    rss_bytes: int | None = None       # that process's resident memory
    restarts: int = 0                  # restarts after its process died, since the stream was last started
    delivery: str = "at_least_once"    # its Delivery, as text
    errors_tolerance: str = "none"     # its ErrorsTolerance, as text
    dead_letter_topic: str | None = None
    dead_lettered: int = 0             # messages sent to the dead-letter topic, since the stream was created
    skipped: int = 0                   # messages skipped (errors.tolerance 'all' without a dead-letter topic)
    # Batches written since the host started (all runs of the stream), for /metrics:
    records: int = 0
    batches: int = 0
    batch_seconds_sum: float = 0.0
    batch_seconds_buckets: tuple[int, ...] = ()   # batches at or below each BATCH_SECONDS_BOUNDS, then all
    detail: str | None = None          # why it is in its state when that is not obvious (`starting`: what it waits for)
    tasks: int = 1                     # member processes of its group (StreamConfig.tasks)
    pids: tuple[int, ...] = ()         # one per running task (`pid` is the first)
    key_format: str = "bytes"          # how its keys and values are decoded (stream_registry.formats)
    value_format: str = "bytes"
    schema_registry_url: str | None = None
    transform_options: Mapping[str, Any] = field(default_factory=dict)
    records_lost: int = 0              # records that left the log before the stream read them (history rows `lost`)
    records_lost_unacknowledged: int = 0   # of those, not acknowledged by an operator yet (acknowledge_loss)
    cluster_unreachable_since: datetime | None = None   # its running consumer finds no broker answering, since
    engine: str = "host"               # what runs it (stream_engine.py): host, or spark (a Structured Streaming query)
    spark: Mapping[str, Any] | None = None   # a running Spark stream's query: id, last batch id, rows/s, batch time


# -- offsets: reports, history, pending changes, previews ----------------------------------------------
@dataclass(frozen=True, kw_only=True)
class OffsetChange:
    """One partition's outcome of set_offset (Memgraph dialect offsets are never stored here:
    `offset` is the concrete offset, None when the partition could not be changed)."""
    topic: str
    partition: int
    previous_offset: int | None
    offset: int | None
    status: ChangeStatus
    message: str = ""
    change_id: int | None = None   # the call's change (None: a dry run, or nothing to change)


@dataclass(frozen=True, kw_only=True)
class PartitionOffsets:
    """One row of describe(), like `kafka-consumer-groups --describe`."""
    topic: str
    partition: int
    committed_offset: int | None
    position: int | None
    log_start_offset: int
    log_end_offset: int
    lag: int | None                    # None: not known now (the stream's cluster cannot be reached)
    assigned: bool
    stored_offset: int | None = None   # exactly-once: the next offset the sink holds with the data
    resume_offset: int | None = None   # where the stream resumes if started now: pending, else stored
    task: int | None = None            # the index of the stream's task that holds it (None: none does)
                                       # (exactly-once), else committed, else auto.offset.reset
    # Set while the stream's cluster cannot be reached: the row is the last lag round's, of that moment (its
    # offsets are that round's; lag, position, stored and resume are not known now).
    last_known_lag: int | None = None
    last_known_at: datetime | None = None
    last_known_age_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class HistoryEntry:
    """A row of the registry's audit history: an applied offset change, or a poison message set aside
    (status skipped or dead_lettered: `offset` is that message's, `message` the error it raised)."""
    changed_at: datetime
    topic: str
    partition: int
    previous_offset: int | None
    offset: int
    status: ChangeStatus
    message: str | None = None
    change_id: int | None = None    # the call's: every partition one call changed shares it (revert takes it)


@dataclass(frozen=True, kw_only=True)
class PendingOffset:
    """An offset change waiting for its partition to be assigned (a stopped stream, or a partition another
    member of the group holds); `previous_offset` is where the partition stood when it was requested."""
    topic: str
    partition: int
    offset: int
    requested_at: datetime
    previous_offset: int | None = None
    message: str | None = None     # e.g. "revert of change 12", recorded in the history once applied
    change_id: int | None = None   # the call it belongs to (every partition of one call shares it)
    reason: str | None = None      # why it waits beyond an assignment (its commit failed, retried)
    onward: bool = False           # the target never moves the partition back (ResolvedOffset.onward)


@dataclass(frozen=True, kw_only=True)
class PreviewStatement:
    """One statement the stream's transformation makes of the record at topic/partition/offset (a preview:
    nothing was written); `parameters` are plain JSON values (bytes as text, times as ISO-8601). A record the
    transformation fails on is one row with an empty query and the failure in `error`."""
    topic: str
    partition: int
    offset: int
    query: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class PartitionSnapshot:
    """What is known of one partition when a spec is resolved."""
    topic: str
    partition: int
    log_start: int
    log_end: int
    committed: int | None = None
    position: int | None = None


@dataclass(frozen=True, kw_only=True)
class ResolvedOffset:
    topic: str
    partition: int
    previous_offset: int | None
    offset: int | None
    clamped: bool
    message: str
    unchanged: bool = False   # keeps its offset (`offset` is the previous one, maybe None): nothing to apply
    # `offset` stands for "the end" (latest, or clamped to the log end) or "on from here" (+N), as read now:
    # the stream moves on before the change is applied, and such a change never moves a partition back
    onward: bool = False

    @property
    def failed(self) -> bool:
        return self.offset is None and not self.unchanged


# -- what a stream process reports through its pipe ---------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class PendingMove:
    """A change the host holds as pending when it starts a stream: its change set and target."""
    change_id: int
    offset: int
    onward: bool = False   # the target never moves the partition back (ResolvedOffset.onward)


@dataclass(frozen=True, kw_only=True)
class GateEvent:
    """One transition the gate reports: what a waiting caller and the history need to know."""
    change_id: int
    topic: str
    partition: int
    offset: int
    state: MoveState
    previous_offset: int | None = None   # PERSISTED: where the partition stood before, when known
    reason: str | None = None            # WAITING after a failed persist: why; PERSISTED: why not the target
    more: bool = False                   # PERSISTED: more of one persist follow at once (recorded together)


@dataclass(frozen=True, kw_only=True)
class Realignment:
    """An exactly-once stream resumes one partition elsewhere than where it stood (its group's commit, or its
    own view of the sink's offsets), because its sink stores other offsets: from where, to where, and why.
    Recorded in the history (ChangeStatus.REALIGNED) and logged; never silent."""
    topic: str
    partition: int
    previous_offset: int | None
    offset: int
    reason: str


@dataclass(frozen=True, kw_only=True)
class SetAside:
    """A message the stream did not write to the graph, and why."""
    topic: str
    partition: int
    offset: int
    error: str
    dead_lettered: bool    # False: skipped (no dead-letter topic), recorded in the stream's history


@dataclass(frozen=True, kw_only=True)
class RecordsLost:
    """Records [from_offset, to_offset) of one partition that the stream never read: they left the log (its start
    moved past the stream's offset: retention) before the stream got to them, and it went on from `to_offset`."""
    topic: str
    partition: int
    from_offset: int
    to_offset: int
    log_start: int

    @property
    def count(self) -> int:
        return self.to_offset - self.from_offset

    def describe(self) -> str:
        return (f"{self.count} record(s) of {self.topic}:{self.partition} (offsets {self.from_offset} to "
                f"{self.to_offset - 1}) left the log before the stream read them (log start {self.log_start})")


@dataclass(frozen=True, kw_only=True)
class WorkerSnapshot:
    """What the poll thread last saw, for describe() and offset changes."""
    assigned: frozenset = frozenset()
    positions: Mapping = field(default_factory=dict)
    pending: Mapping = field(default_factory=dict)
    stored: Mapping = field(default_factory=dict)   # exactly-once: the offsets the sink holds, as last written
    holders: Mapping = field(default_factory=dict)  # tasks: N > 1: the index of the task holding each partition


# -- lag ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class PartitionLag:
    """One partition in a stream's last round: offsets, lag, lag in seconds (and how it was found), verdict."""
    topic: str
    partition: int
    committed_offset: int | None
    log_start_offset: int
    log_end_offset: int
    lag: int | None                    # None: not known now (the last round could not sample it)
    lag_seconds: float | None
    lag_seconds_method: LagSecondsMethod
    status: Verdict
    message: str
    alarm: bool = False
    change_id: int | None = None
    assigned: bool = False
    # While the lag is not known: the last known one, when it was sampled and how long ago (its offsets above are
    # of that moment too)
    last_known_lag: int | None = None
    last_known_at: datetime | None = None
    last_known_age_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class StreamLag:
    """A stream's last round: `status` is its verdict (its worst partition's), `stream_status` its state.

    Lag that is not known (the round could not sample the stream, or none has yet) is None, never a number: while
    its cluster cannot be reached, the `last_known_*` fields hold the last round's figures, when and how long ago."""
    name: str
    consumer_group: str
    stream_status: StreamStatus
    status: Verdict
    message: str
    total_lag: int | None
    max_lag: int | None
    max_lag_seconds: float | None
    records_per_second: float
    sampled_at: datetime | None
    interval_s: float
    offset_changes: int = 0            # applied offset changes recorded for the stream (history rows)
    dead_lettered: int = 0             # from the stream's StreamInfo
    error: str | None = None           # why the last round could not sample it (Kafka unreachable)
    partitions: tuple[PartitionLag, ...] = ()
    age_s: float | None = None         # seconds since `sampled_at`, when it was read (None: never sampled)
    cluster_up: bool = True            # False: the last round could not reach the stream's cluster
    skipped: int = 0                   # from the stream's StreamInfo
    pending_changes: int = 0           # offset changes waiting for an assignment
    records_lost: int = 0              # from the stream's StreamInfo
    records_lost_unacknowledged: int = 0
    last_known_total_lag: int | None = None   # while the lag is not known: the last round's total and largest,
    last_known_max_lag: int | None = None
    last_known_at: datetime | None = None     # when that round sampled them,
    last_known_age_s: float | None = None     # and how long ago (when this was read)

    @property
    def quiet(self) -> bool:
        """A STOP that needs no one: the stream was stopped (or never started) and nothing waits for it."""
        return self.status == Verdict.STOP and self.stream_status in (StreamStatus.CREATED, StreamStatus.STOPPED) \
            and not self.total_lag


@dataclass(frozen=True, kw_only=True)
class LagPoint:
    """A stream's totals at one round, for charts."""
    at: float
    total_lag: int
    max_lag_seconds: float | None
    records_per_second: float
    status: Verdict
    committed: int = 0        # the committed offsets' sum (what the stream had consumed), for the trend
    partitions: tuple[tuple[str, int, int], ...] = ()   # (topic, partition, lag) per partition: a line each


# -- operator caps (issue 31): what no caller can make the host run -----------------------------------
MAX_STREAMS_ENV = "MGSTREAMS_MAX_STREAMS"             # streams defined
MAX_RUNNING_ENV = "MGSTREAMS_MAX_RUNNING"             # stream processes running
STREAM_MEMORY_MB_ENV = "MGSTREAMS_STREAM_MEMORY_MB"   # resident memory of one stream process


@dataclass(frozen=True, kw_only=True)
class StreamCaps:
    """Operator caps, sized by default for a small machine (a stream process is about 65 MiB at rest)."""
    max_streams: int = 64
    max_running: int = 8
    stream_memory_mb: int = 512
