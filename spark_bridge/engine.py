"""Which engine runs a backfill: Spark, or the local engine in this process.

`--engine auto` (the default) estimates both from the plan before starting
anything: the plan's offsets are the work (an upper bound on records). Each
engine's estimate is what it measurably cost here (engine_costs: the backfills
run before, kept in the state directory: a fixed part, Spark's session start
and a rate, per engine, Spark target and transformation). An engine never run
here is estimated from CostModel's constants until its first run: the local
engine at `local_rate`, Spark faster by the workers it can run at once, after
paying its start (a new session and its Python workers: about 11 s on 2 cores;
little for a Spark Connect server that is already up, or for a session this
process already has). The cheaper estimate wins. Plain Python:
`spark_installed()` looks for pyspark without importing it.
"""
from __future__ import annotations

import importlib.util
import math
import os
import re
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit

from stream_registry.errors import ConfigError
from stream_registry.redaction import MASK

from .engine_costs import MeasuredCosts
from .range_plan import RangePlan

SPARK_MODULES = ("pyspark", "pyarrow", "pandas")
CONNECT_MODULES = ("grpc", "grpc_status", "zstandard")     # pyspark[connect]'s client, also in the extra
SPARK_EXTRA = "mgstreams[spark]"


class Engine(StrEnum):
    AUTO = "auto"
    SPARK = "spark"
    LOCAL = "local"

    @classmethod
    def parse(cls, value: str | Engine) -> Engine:
        if isinstance(value, Engine):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            raise ConfigError(f"engine: expected auto, spark or local, got {value!r}") from None


class SparkUnavailable(ConfigError):
    """The Spark engine was asked for on an install without the `[spark]` extra."""


def missing_spark_modules(connect: bool = False) -> list[str]:
    """The modules of the `[spark]` extra this Python cannot import (found without importing them);
    with `connect`, the Spark Connect client's too."""
    missing = []
    for name in SPARK_MODULES + (CONNECT_MODULES if connect else ()):
        try:
            if importlib.util.find_spec(name) is None:
                missing.append(name)
        except (ImportError, ValueError):
            missing.append(name)
    return missing


def spark_installed() -> bool:
    return not missing_spark_modules()


def require_spark(option: str = "--engine spark", connect: bool = False) -> None:
    """Raise SparkUnavailable naming the extra to install when pyspark, pyarrow or pandas (with
    `connect`, also the Spark Connect client's grpc, grpc_status, zstandard) is missing."""
    missing = missing_spark_modules(connect)
    if missing:
        raise SparkUnavailable(f"{option}: needs {', '.join(missing)} (not installed); install the Spark extra: "
                               f"pip install '{SPARK_EXTRA}' (or run with --engine local)")


@dataclass(frozen=True)
class SparkTarget:
    """Where a Spark run would go, as far as the cost model needs it."""
    description: str         # for messages: a Connect URL's token is masked
    workers: int             # tasks it runs at once
    startup_seconds: float   # before the first record: session, executors, Python workers
    same_machine: bool       # its workers share this machine's cores
    connect: bool = False    # Spark Connect (needs its client packages)


@dataclass(frozen=True)
class CostModel:
    """The estimate before an engine's first measured run here (engine_costs): rates measured once on this
    project's 2-core machines (bench/backfill_throughput.py)."""
    local_rate: float = 130_000.0           # records/s of one process (light transformation, 200 B messages)
    worker_efficiency: float = 0.7          # each worker beyond the first adds this share of local_rate
    local_start: float = 0.1                # one consumer, the transformation loaded
    task_start: float = 0.15                # per Spark task: a consumer, the transformation, the sink
    new_local_session: float = 11.0         # local[N]: JVM, SparkContext, first Python worker
    new_connect_local: float = 14.0         # --remote local[N]: the same plus a Connect server
    connect_server: float = 3.0             # sc://: a server that is up (first job: its Python workers)
    new_cluster_session: float = 30.0       # spark://, yarn, k8s://: executors to be granted
    active_session: float = 1.0             # this process has a session already
    cluster_workers: int = 8                # a cluster whose size is unknown here


@dataclass(frozen=True)
class EngineChoice:
    engine: Engine                 # SPARK or LOCAL
    requested: Engine
    reason: str
    records: int
    local_seconds: float | None = None
    spark_seconds: float | None = None

    def to_dict(self) -> dict:
        return {"engine": self.engine.value, "requested": self.requested.value, "reason": self.reason,
                "records": self.records,
                "estimate_seconds": {"local": _round(self.local_seconds), "spark": _round(self.spark_seconds)}}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def shown_remote(remote: str) -> str:
    """A Spark Connect URL for messages: `;token=…` (and any other secret-looking parameter) masked."""
    return re.sub(r"(;\s*(?:token|[\w-]*secret[\w-]*|[\w-]*password[\w-]*)\s*=)[^;]*", r"\1" + MASK, remote,
                  flags=re.I)


_LOCAL_MASTER = re.compile(r"^local(?:\[(\d+|\*)(?:\s*,\s*\d+)?\])?$")


def spark_target(master: str | None = None, remote: str | None = None, *, active_session: bool = False,
                 under_submit: bool = False, cores: int | None = None,
                 model: CostModel = CostModel()) -> SparkTarget:
    """What `--master` / `--remote` (or neither: local[*], spark-submit's, the active session) means for cost."""
    cores = cores or os.cpu_count() or 1
    if remote:
        if remote.startswith("sc://"):
            host = urlsplit(remote).hostname or "localhost"
            here = host in ("localhost", "127.0.0.1", "::1") or host.startswith("127.")
            return SparkTarget(shown_remote(remote), cores if here else model.cluster_workers, model.connect_server,
                               here, connect=True)
        workers = _local_workers(remote, cores)
        return SparkTarget(f"Spark Connect {remote}", workers, model.new_connect_local, True, connect=True)
    if active_session or under_submit:
        workers = _local_workers(master, cores) if master and _LOCAL_MASTER.match(master) else cores
        return SparkTarget("the active session" if active_session else "spark-submit's session", workers,
                           model.active_session if active_session else model.new_local_session, True)
    master = master or "local[*]"
    if _LOCAL_MASTER.match(master):
        return SparkTarget(master, _local_workers(master, cores), model.new_local_session, True)
    return SparkTarget(master, model.cluster_workers, model.new_cluster_session, False)


def _local_workers(master: str | None, cores: int) -> int:
    found = _LOCAL_MASTER.match(master or "")
    if not found:
        return cores
    if found.group(1) is None:
        return 1                        # plain `local`: one thread
    return cores if found.group(1) == "*" else max(1, int(found.group(1)))


def estimate_local(records: int, model: CostModel = CostModel()) -> float:
    return model.local_start + records / model.local_rate


def estimate_spark(records: int, ranges: int, target: SparkTarget, model: CostModel = CostModel(),
                   cores: int | None = None) -> float:
    cores = cores or os.cpu_count() or 1
    workers = max(1, min(target.workers, ranges, cores if target.same_machine else target.workers))
    speedup = 1 + (workers - 1) * model.worker_efficiency
    waves = math.ceil(ranges / workers) if ranges else 0
    return target.startup_seconds + waves * model.task_start + records / (model.local_rate * speedup)


def choose_engine(requested: Engine | str, range_plan: RangePlan, target: SparkTarget,
                  model: CostModel = CostModel(), *, spark_available: bool | None = None,
                  cores: int | None = None, costs: MeasuredCosts | None = None,
                  transform: str = "") -> EngineChoice:
    """The engine to run `range_plan` with; `spark` is checked to be installed (SparkUnavailable). `costs`:
    what the engines measurably cost here (engine_costs), for `transform`; without them, or for an engine they
    never saw, the model's constants."""
    requested = Engine.parse(requested)
    records, ranges = range_plan.total_offsets, len(range_plan.ranges)
    if requested is Engine.LOCAL:
        return EngineChoice(Engine.LOCAL, requested, "asked for (--engine local)", records)
    if requested is Engine.SPARK:
        require_spark(connect=target.connect)
        return EngineChoice(Engine.SPARK, requested, f"asked for (--engine spark, {target.description})", records)
    available = not missing_spark_modules(target.connect) if spark_available is None else spark_available
    costs = costs or MeasuredCosts(None)
    measured_local = costs.fitted(Engine.LOCAL.value, "", transform, model.local_start)
    local = measured_local.seconds(records) if measured_local else estimate_local(records, model)
    if not available:
        return EngineChoice(Engine.LOCAL, requested, f"auto: Spark is not installed ({SPARK_EXTRA} gives it)",
                            records, local)
    workers = max(1, min(target.workers, ranges or 1))
    measured_spark = costs.fitted(Engine.SPARK.value, target.description, transform,
                                  math.ceil(ranges / workers) * model.task_start if ranges else 0.0)
    spark = measured_spark.seconds(records) if measured_spark else estimate_spark(records, ranges, target, model,
                                                                                  cores)
    start = measured_spark.start if measured_spark else target.startup_seconds
    engine = Engine.SPARK if spark < local else Engine.LOCAL
    reason = (f"auto: {records} offset(s) in {ranges} range(s): local ≈ {local:.1f} s ({_basis(measured_local)}), "
              f"spark {target.description} ≈ {spark:.1f} s ({start:.0f} s to start; {_basis(measured_spark)})")
    return EngineChoice(engine, requested, reason, records, local, spark)


def _basis(fitted) -> str:
    if fitted is None:
        return "not run here yet: the model's constants"
    return f"measured: {fitted.runs} run(s) here, {fitted.rate:,.0f} records/s"
