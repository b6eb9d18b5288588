"""The streams the soak runs: one topic each, their group protocols, batch sizes and the transformation."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent     # the host loads the transformation from here
TRANSFORM_MODULE = "soak_transform"
TRANSFORM = f"{TRANSFORM_MODULE}.record"
PARTITIONS = 4
BROKERS = (1, 2, 3)
GROUP_CONFIG = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}


@dataclass(frozen=True)
class StreamPlan:
    name: str
    topic: str
    strategy: str
    batch_size: int
    batch_interval_ms: int

    @property
    def group(self) -> str:
        return f"soak_group_{self.name}"

    def group_config(self) -> dict:
        """The protocol's settings: KIP-848 (`consumer`) takes its session from the broker, not the client."""
        if self.strategy == "consumer":
            return {"group.protocol": "consumer"}
        return {**GROUP_CONFIG, "partition.assignment.strategy": self.strategy}


STREAMS = (
    StreamPlan("soak_a", "soak_a", "range", 100, 100),
    StreamPlan("soak_b", "soak_b", "cooperative-sticky", 50, 300),
    StreamPlan("soak_c", "soak_c", "range", 200, 500),     # long batches: rebalances land mid-batch
    StreamPlan("soak_d", "soak_d", "consumer", 100, 200),  # KIP-848: the broker assigns incrementally
)

