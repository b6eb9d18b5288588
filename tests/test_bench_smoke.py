"""The benchmarks run end to end on tiny topics and print their ratios."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "ingest_throughput.py"


@pytest.mark.parametrize("sink", ["cypherl", "null"])
def test_ingest_throughput_bench_prints_ratio(sink):
    done = subprocess.run([sys.executable, str(BENCH), "--messages", "2000", "--rounds", "1", "--sink", sink],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert any(line.startswith("raw rate:") for line in lines), done.stdout
    assert any(line.startswith("stream rate:") for line in lines), done.stdout
    ratio = [line for line in lines if line.startswith("ratio:")]
    assert ratio and float(ratio[0].split()[1]) > 0, done.stdout


def test_offset_latency_bench_prints_ratio():
    bench = BENCH.parent / "offset_latency.py"
    done = subprocess.run([sys.executable, str(bench), "--changes", "3", "--baseline-changes", "1",
                           "--per-partition", "300", "--rewind", "100"], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    ratio = [line for line in done.stdout.splitlines() if line.startswith("ratio:")]
    assert ratio and float(ratio[0].split()[1]) > 1, done.stdout
