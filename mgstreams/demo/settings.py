"""What a demo run is told: where it writes, the seeded data, the offsets it moves, the sink, Spark's master."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..query_module import STREAMS_MODULE

TRANSFORM = "transfers.transfer"
SCHEMA = "CREATE INDEX ON :Account(id);\n"


@dataclass(frozen=True)
class DemoSettings:
    out: Path
    seed: int = 7
    events: int = 3000
    accounts: int = 250
    partitions: int = 6
    topic: str = "transfers"
    stream: str = "transfers"
    live_from: int = 100          # set_offset during the rebalance: every partition starts here
    rewind_by: int = 50           # set_offset while running: these partitions go back this far
    rewind_partitions: tuple[int, ...] = (0, 3)
    backfill_from: int = 50       # the backfill reads [backfill_from, committed)
    batch_size: int = 500
    memgraph_uri: str | None = None   # bolt://host:port: the live stream writes to Memgraph instead
    memgraph_credentials: Mapping[str, str] = field(default_factory=dict, repr=False)
    spark_master: str = "local[2]"
    query_module: Path = STREAMS_MODULE
    timeout_s: float = 60.0
    # librdkafka settings a broker may need (the tests' Tansu leg: short sessions, one record per batch)
    consumer_configs: Mapping[str, object] = field(default_factory=dict)
    producer_configs: Mapping[str, object] = field(default_factory=dict)

    @property
    def out_dir(self) -> Path:
        return Path(self.out).resolve()

    @property
    def live_path(self) -> Path:
        return self.out_dir / "live.cypherl"

    @property
    def backfill_dir(self) -> Path:
        return self.out_dir / "backfill"

    @property
    def state_dir(self) -> Path:
        return self.out_dir / "state"

    @property
    def host_log(self) -> Path:
        return self.out_dir / "host.log"

    @property
    def schema_path(self) -> Path:
        return self.out_dir / "schema.cypherl"

    @property
    def report_path(self) -> Path:
        return self.out_dir / "backfill-report.json"

    @property
    def spark_log(self) -> Path:
        return self.out_dir / "spark.log"

    @property
    def sink(self) -> str:
        return self.memgraph_uri or f"cypherl://{self.live_path}"

    @property
    def bolt(self) -> bool:
        return self.memgraph_uri is not None
