"""What each backfill engine has cost here, measured, for `--engine auto` (spark_bridge.engine).

Every backfill that runs records what it measured in `<state dir>/engine-costs.json`: the engine, where Spark
ran (its target: `local[2]`, a Connect URL, the active session), the transformation, the records and the
seconds of the backfill itself, and for Spark the seconds its session took to start. An estimate for the next
plan is then a line fitted to the last runs of that engine and target (`seconds = fixed + records / rate`, least
squares; with one run, or runs of one size, the model's fixed cost and the rate that leaves), preferring runs
of the same transformation. An engine or target never run here is estimated from CostModel's constants until
its first run: the estimate follows what the engines cost on this machine now, not an earlier round.

The file is small (at most RUNS_KEPT runs per engine, target and transformation), written whole to a temporary
file and renamed; one that cannot be read or written is ignored (an estimate from the constants, a note at most):
the costs are advice, never a reason for a backfill to fail.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

COSTS_FILE = "engine-costs.json"
RUNS_KEPT = 8


@dataclass(frozen=True)
class Run:
    """One measured backfill."""
    engine: str            # "local" or "spark"
    target: str            # where Spark ran (SparkTarget.description); "" for the local engine
    transform: str
    records: int
    seconds: float         # the backfill itself: planning done, session started
    start: float = 0.0     # Spark: the session's start (build or get)
    at: float = 0.0        # time.time() when recorded


@dataclass(frozen=True)
class Fitted:
    """An engine's measured cost: `start + fixed + records / rate` seconds."""
    start: float
    fixed: float
    rate: float
    runs: int              # how many runs it was fitted to

    def seconds(self, records: int) -> float:
        return self.start + self.fixed + records / self.rate


class MeasuredCosts:
    """The runs kept in a state directory (or none: `directory` None, or a file that cannot be read)."""

    def __init__(self, directory: str | os.PathLike | None, runs: Iterable[Run] = ()):
        self.path = Path(directory) / COSTS_FILE if directory is not None else None
        self.runs = list(runs)

    @classmethod
    def load(cls, directory: str | os.PathLike | None) -> MeasuredCosts:
        costs = cls(directory)
        if costs.path is None:
            return costs
        try:
            entries = json.loads(costs.path.read_text())["runs"]
            costs.runs = [Run(**entry) for entry in entries]
        except (OSError, ValueError, KeyError, TypeError):
            costs.runs = []   # none yet, or unreadable: the constants until a run writes it again
        return costs

    def record(self, run: Run) -> bool:
        """Keep `run` (and the last RUNS_KEPT of its engine, target and transformation); False when the file
        could not be written."""
        run = Run(**{**asdict(run), "at": run.at or time.time()})
        same = [r for r in self.runs if (r.engine, r.target, r.transform) == (run.engine, run.target, run.transform)]
        dropped = set(map(id, same[:max(0, len(same) + 1 - RUNS_KEPT)]))
        self.runs = [r for r in self.runs if id(r) not in dropped] + [run]
        if self.path is None:
            return False
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=self.path.parent, prefix=".engine-costs.", delete=False) as f:
                json.dump({"runs": [asdict(r) for r in self.runs]}, f, indent=1)
            os.replace(f.name, self.path)
        except OSError:
            return False
        return True

    def fitted(self, engine: str, target: str, transform: str, prior_fixed: float) -> Fitted | None:
        """The cost of `engine` at `target` fitted to its runs, those of `transform` if any (else of any
        transformation); None when it never ran here."""
        mine = [r for r in self.runs if (r.engine, r.target) == (engine, target)]
        runs = [r for r in mine if r.transform == transform] or mine
        if not runs:
            return None
        runs = sorted(runs, key=lambda r: r.at)[-RUNS_KEPT:]
        start = sum(r.start for r in runs) / len(runs)
        fixed, per_record = _line([(r.records, r.seconds) for r in runs], prior_fixed)
        return Fitted(start, fixed, 1 / per_record, len(runs))


def _line(points: list[tuple[int, float]], prior_fixed: float) -> tuple[float, float]:
    """(fixed seconds, seconds per record) of `points` (records, seconds): a least-squares line when the points
    span sizes and it has a non-negative fixed part and a positive slope; else `prior_fixed` and the slope
    through the points' sums."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if n > 1 and spread > 0:
        slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread
        fixed = mean_y - slope * mean_x
        if slope > 0 and fixed >= 0:
            return fixed, slope
    records = sum(x for x, _ in points)
    seconds = sum(max(y - prior_fixed, 0.0) for _, y in points)
    fixed = prior_fixed if seconds > 0 else 0.0
    return fixed, max(seconds if seconds > 0 else sum(y for _, y in points), 1e-9) / max(records, 1)
