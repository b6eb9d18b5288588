"""The benchmarks run end to end on tiny topics and print their ratios."""
from __future__ import annotations

import re
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


def test_offset_latency_bench_prints_medians_and_ratio():
    """A short run through the Cypher path (module -> host child process -> sink file): both paths timed,
    the ratio is the quotient of the printed medians, and `--help` still works."""
    bench = BENCH.parent / "offset_latency.py"
    done = subprocess.run([sys.executable, str(bench), "--changes", "3", "--baseline-changes", "1",
                           "--per-partition", "300", "--rewind", "100"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()

    def median_of(prefix: str) -> float:
        line = next((line for line in lines if line.startswith(prefix)), None)
        assert line is not None, done.stdout
        match = re.search(r"\((\d+) changes?\): median ([\d.]+) ms, p95 ([\d.]+) ms, max ([\d.]+) ms$", line)
        assert match, line
        count, median, p95, top = int(match[1]), *map(float, match.group(2, 3, 4))
        assert count >= 1 and 0 < median <= p95 <= top, line
        return median

    running, baseline = median_of("running path,"), median_of("baseline,")
    assert running < 10_000 and baseline > running, done.stdout
    ratio = [line for line in lines if line.startswith("ratio:")]
    assert ratio and float(ratio[0].split()[1]) == pytest.approx(baseline / running, rel=0.01, abs=0.06), done.stdout
    helped = subprocess.run([sys.executable, str(bench), "--help"], capture_output=True, text=True, timeout=30)
    assert helped.returncode == 0 and "--baseline-changes" in helped.stdout
