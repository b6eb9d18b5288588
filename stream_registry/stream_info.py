"""What the registry reports about a stream: its state and its masked configuration."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Mapping


class StreamStatus(str, Enum):
    CREATED = "created"
    STARTING = "starting"   # subscribed, the group has not assigned partitions yet
    RUNNING = "running"
    STOPPED = "stopped"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
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


SESSION_TIMEOUT_MS = 45_000        # librdkafka's default session.timeout.ms
INITIAL_REBALANCE_DELAY_S = 3      # brokers' (and the embedded cluster's) group.initial.rebalance.delay.ms


def starting_detail(configs: Mapping[str, object], waited_s: float) -> str:
    """What a `starting` stream waits for, with the figures of its own consumer config: the group's first
    assignment comes after the broker's initial rebalance delay, and a rejoin after a restart can wait until
    the member of the stream's previous run is dropped, up to its session timeout."""
    try:
        session_s = int(configs.get("session.timeout.ms", SESSION_TIMEOUT_MS)) / 1000
    except (TypeError, ValueError):
        session_s = SESSION_TIMEOUT_MS / 1000
    return (f"waiting for the group to assign partitions ({waited_s:.0f} s so far): a first join waits about "
            f"{INITIAL_REBALANCE_DELAY_S} s (the broker's group.initial.rebalance.delay.ms); a rejoin after a restart "
            f"or a crash waits up to session.timeout.ms ({session_s:g} s) for the previous member to leave")
