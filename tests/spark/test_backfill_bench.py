"""bench/backfill_throughput.py end to end on a tiny topic: every engine runs through `mgstreams backfill` in its
own process, auto says what it picked, and the output ends with `auto/best: R` (the floors mean nothing on a few
hundred records, so only a crash fails: exit 2 and 3 are floors not met, 1 a failed run)."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
from paths import ROOT

BENCH = ROOT / "bench" / "backfill_throughput.py"


@pytest.mark.spark
def test_backfill_bench_prints_per_size_times_the_ratio_and_auto_best():
    done = subprocess.run([sys.executable, str(BENCH), "--sizes", "400", "--partitions", "4", "--short-runs", "1"],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode in (0, 2, 3), done.stdout[-2000:] + done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    size = next((re.match(r"size 400: local ([\d.]+) s, spark local\[2\] ([\d.]+) s, auto ([\d.]+) s "
                          r"\(picked (local|spark)\); auto/best ([\d.]+), picked/best ([\d.]+) ", line)
                 for line in lines
                 if line.startswith("size 400:")), None)
    assert size, done.stdout
    local, spark, auto = map(float, size.group(1, 2, 3))
    assert size.group(4) == "local" and local < spark         # 400 records: Spark's start alone costs more
    assert float(size.group(5)) == pytest.approx(auto / min(local, spark), rel=0.03, abs=0.011)
    assert any(re.match(r"ratio: [\d.]+ ", line) for line in lines), done.stdout
    assert float(size.group(6)) == pytest.approx(local / min(local, spark), rel=0.03, abs=0.011)   # local picked
    assert any(line.startswith("  auto at 400: auto: 400 offset(s) in 4 range(s): local ≈") for line in lines)
    last = re.match(r"auto/best: ([\d.]+)", lines[-1])
    assert last and float(last.group(1)) == pytest.approx(float(size.group(5)), abs=0.011), done.stdout
