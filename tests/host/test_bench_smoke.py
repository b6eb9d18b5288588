"""The benchmarks run end to end on tiny topics and print their ratios."""
from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest
from paths import ROOT

BENCH = ROOT / "bench" / "ingest_throughput.py"


@pytest.mark.parametrize("sink", ["cypherl", "null"])
def test_ingest_throughput_bench_prints_ratio(sink):
    """With a null sink also --profile: the stream process's stages, timed in its process under the host."""
    profile = ["--profile"] if sink == "null" else []
    done = subprocess.run([sys.executable, str(BENCH), "--messages", "2000", "--rounds", "1", "--sink", sink,
                           *profile], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert any(line.startswith("raw rate:") for line in lines), done.stdout
    assert any(line.startswith("stream rate:") for line in lines), done.stdout
    ratio = [line for line in lines if line.startswith("ratio:")]
    assert ratio and float(ratio[0].split()[1]) > 0, done.stdout
    if profile:   # 2000 messages: two batches, the first left out (start-up)
        for stage in ("consume", "transformation", "commit wait", "between batches", "total (poll thread)"):
            assert re.search(rf"^    {re.escape(stage)}\s+[\d.]+\s", done.stdout, re.M), done.stdout


def test_ingest_throughput_bench_runs_the_host_and_measures_bolt_round_trips():
    """Through a host's stream process and the Bolt connection stand-in: folded and one-at-a-time rates, round
    trips per transaction (1 folded: one statement runs on its own; 1000 + 2 one at a time for full
    1000-message batches) and the speed-up."""
    done = subprocess.run([sys.executable, str(BENCH), "--messages", "3000", "--rounds", "1", "--sink",
                           "bolt-standin"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    for prefix in ("raw rate:", "stream rate:", "consume rate:", "one_at_a_time rate:", "stream / consume-only:"):
        assert any(line.startswith(prefix) for line in lines), done.stdout
    trips = next(line for line in lines if line.startswith("round trips per transaction:"))
    folded, single = map(float, re.findall(r"([\d.]+) (?:folded|one at a time) ", trips))
    assert folded <= 5 and single >= 500, trips
    speed_up = next(line for line in lines if line.startswith("speed-up:"))
    assert float(speed_up.split()[1].rstrip("x")) > 1, speed_up


def test_ingest_throughput_bench_writes_to_a_real_graph_server():
    """--sink bolt: the stream and the raw loop into a real server (FalkorDB): rates, round trips, the ratio."""
    done = subprocess.run([sys.executable, str(BENCH), "--messages", "2000", "--rounds", "1", "--sink", "bolt"],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    for prefix in ("raw rate:", "stream rate:", "consume rate:", "ratio:"):
        assert any(line.startswith(prefix) for line in lines), done.stdout
    assert any("round trips per 1000 messages" in line for line in lines), done.stdout
    summary = [line for line in lines if line.startswith("rows/s and round trips per 1000 messages")]
    assert summary and "raw" in summary[0] and "stream" in summary[0] and "unknown" not in summary[0], done.stdout


def test_ingest_throughput_bench_compares_exactly_once_with_at_least_once():
    done = subprocess.run([sys.executable, str(BENCH), "--messages", "2000", "--rounds", "1",
                           "--delivery", "exactly_once"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert any(line.startswith("at_least_once rate:") for line in lines), done.stdout
    assert any(line.startswith("exactly_once rate:") for line in lines), done.stdout
    ratio = [line for line in lines if line.startswith("ratio:")]
    assert ratio and float(ratio[0].split()[1]) > 0 and "exactly_once / at_least_once" in ratio[0], done.stdout


def test_ingest_throughput_bench_compares_a_poisoned_topic_with_a_clean_one():
    """The bench itself checks that every poison message reached the dead-letter topic and every other one
    the file; a wrong count exits non-zero."""
    done = subprocess.run([sys.executable, str(BENCH), "--messages", "3000", "--rounds", "1",
                           "--poison-every", "500"], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert "6 poison messages (1 in 500)" in done.stdout, done.stdout
    assert any(line.startswith("poisoned rate:") for line in lines), done.stdout
    ratio = [line for line in lines if line.startswith("ratio:")]
    assert ratio and float(ratio[0].split()[1]) > 0 and "poisoned / clean" in ratio[0], done.stdout


def test_ingest_throughput_bench_compares_an_avro_stream_with_a_bytes_one_and_runs_debezium():
    """--value-format avro: the same records as JSON and as Avro (the Schema Registry stand-in), the files checked
    to hold every record; --transform debezium: change events through the built-in transformation."""
    done = subprocess.run([sys.executable, str(BENCH), "--messages", "2000", "--rounds", "1", "--value-format",
                           "avro"], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    ratio = [line for line in done.stdout.splitlines() if line.startswith("ratio:")]
    assert ratio and float(ratio[0].split()[1]) > 0 and "avro / bytes" in ratio[0], done.stdout
    done = subprocess.run([sys.executable, str(BENCH), "--messages", "1000", "--rounds", "1", "--transform",
                           "debezium", "--sink", "null"], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "transform stream_registry.builtin_transformations.debezium" in done.stdout
    assert any(line.startswith("stream rate:") for line in done.stdout.splitlines()), done.stdout


@pytest.mark.slow
def test_offset_latency_bench_prints_medians_and_ratio():
    """A short run through the Cypher path (module -> host child process -> sink file): both paths timed,
    the ratio is the quotient of the printed medians, and `--help` still works."""
    bench = BENCH.parent / "offset_latency.py"
    done = subprocess.run([sys.executable, str(bench), "--changes", "3", "--baseline-changes", "1",
                           "--per-partition", "300", "--rewind", "100", "--trace"], capture_output=True, text=True,
                          timeout=120)
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
    assert median_of("tasks: 2 running path,") < 10_000   # the same changes on a stream of two processes
    ratio = [line for line in lines if line.startswith("ratio:")]
    assert ratio and float(ratio[0].split()[1]) == pytest.approx(baseline / running, rel=0.01, abs=0.06), done.stdout
    helped = subprocess.run([sys.executable, str(bench), "--help"], capture_output=True, text=True, timeout=30)
    assert helped.returncode == 0 and "--baseline-changes" in helped.stdout
    # --trace: the call hop by hop, stamped in this process, the host and its stream process, every hop traced
    trace = done.stdout[done.stdout.index("trace of the running path"):]
    for hop in ("query module: HTTP request sent", "host: handler calls the registry", "host: SQLite write of the change",
                "stream: poll thread woke, gate takes it", "stream: seek", "host: outcome written", "call returned",
                "first record at the target on every partition"):
        assert re.search(rf"^{re.escape(hop)}\s+[\d.]+\s+-?[\d.]+\s+[\d.]+\s+[1-3]$", trace, re.M), trace
    assert "(not traced" not in trace, trace


def test_stream_profile_bench_prints_the_stages_of_a_stream_process():
    """bench/stream_profile.py: a stream process's time per message by stage, and its CPU per message."""
    done = subprocess.run([sys.executable, str(BENCH.parent / "stream_profile.py"), "--messages", "3000", "--sink",
                           "cypherl"], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    for stage in ("consume", "collect (gate)", "wrapping", "decode", "transformation", "statement building",
                  "rendering", "sink", "commit", "loop (rest)"):
        assert re.search(rf"^{re.escape(stage)}\s+[\d.]+\s+[\d.]+%\s+[\d.]+$", done.stdout, re.M), done.stdout
    rendering = re.search(r"^rendering\s+([\d.]+)", done.stdout, re.M)
    assert rendering and float(rendering[1]) > 0, "a cypherl sink renders: its stage is timed"
    assert re.search(r"messages 3,000 in .* cpu per message: poll thread [\d.]+ us", done.stdout), done.stdout


def test_multi_stream_bench_prints_ratios_and_rss():
    """Tiny topics: every variant runs through the host (a process per stream) and as threads; both ratios and
    a positive RSS per stream are printed (the floor means nothing on 3,000 messages, so only the exit status
    and the format are checked, as for the ingest bench)."""
    bench = BENCH.parent / "multi_stream.py"
    done = subprocess.run([sys.executable, str(bench), "--messages", "3000", "--rounds", "1"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line.strip() for line in done.stdout.splitlines()]
    for prefix in ("one stream rate:", "two streams rate:", "two threads rate:", "floor: 1.6"):
        assert any(line.startswith(prefix) for line in lines), done.stdout
    for prefix in ("ratio:", "threads ratio:"):
        line = next((line for line in lines if line.startswith(prefix)), None)
        assert line is not None and float(line[len(prefix):].split()[0]) > 0, done.stdout
    for key in ("one/a", "two/a", "two/b", "threads/a+b"):
        match = next((re.match(rf"rss {re.escape(key)}: ([\d.]+) MB", line) for line in lines
                      if line.startswith(f"rss {key}:")), None)
        assert match and float(match[1]) > 0, done.stdout
    pids = {re.search(r"pid (\d+)", line)[1] for line in lines if line.startswith(("rss one/", "rss two/"))}
    assert len(pids) == 3, done.stdout     # a process of its own per stream and run
    bound = next((line for line in lines if line.startswith("what bounds the ratio:")), "")
    poll_us, rdkafka_us = map(float, re.findall(r"([\d.]+) us (?:a message|beside it)", bound))
    assert poll_us > 0 and rdkafka_us >= 0, done.stdout   # the stream's own threads, read from its process


def test_host_load_bench_prints_describe_with_and_without_waiting_calls():
    """A tiny run: 20 set_offset calls wait while describes are timed; both phases, the offset latencies and the
    ratio are printed, and the waiting calls all answered pending once their stream stopped."""
    bench = BENCH.parent / "host_load.py"
    done = subprocess.run([sys.executable, str(bench), "--waiters", "20", "--seconds", "2", "--rate", "10"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    for prefix in ("describe alone (20 calls): median", "describe with 20 waiting set_offset calls (20 calls): median",
                   "set_offset (dry run) alone", "set_offset (timeout 1000 ms) with 20 waiting",
                   "waiting set_offset calls: 20 answered pending", "goal: describe p99 <= 100 ms"):
        assert any(line.startswith(prefix) for line in lines), done.stdout
    ratio = [line for line in lines if line.startswith("ratio:")]
    assert ratio and float(ratio[0].split()[1]) > 0, done.stdout


def _bench_module(name: str):
    sys.path.insert(0, str(BENCH.parent))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH.parent))


def test_multi_stream_steady_rate_times_each_stream_between_its_own_commits():
    """Two streams reading 400k msgs/s each, committing every 0.5 s out of step , looked at
    every 20 ms, whatever B's lateness: the steady aggregate is their 800k msgs/s, not what the committed offsets' lag behind the reading
    makes of a window between two looks (the second stream's first commit opens it while the first one's offset is
    up to 0.5 s stale; the first one's end closes it while the second's is stale)."""
    steady_rate = _bench_module("multi_stream").steady_rate
    count, rate, cadence = 1_000_000, 400_000, 0.5

    def committed(t: float, begin: float) -> int:
        if t < begin:
            return 0
        read = min(count, int((t - begin) * rate))
        if read == count:
            return count
        commits = int((t - begin) / cadence)   # the offsets of what was read by the last commit
        return min(count, int(commits * cadence * rate)) if commits else 0

    for late in (0.05, 0.2, 0.45):
        looks = [(i * 0.02, [committed(i * 0.02, 0.0), committed(i * 0.02, late)]) for i in range(200)]
        assert steady_rate(looks, count) == pytest.approx(2 * rate, rel=0.02), late


def test_idle_fetch_cost_bench_prints_each_wait_and_the_ratio():
    """An idle stream's CPU at each fetch.wait.max.ms (the default added when not asked for), and the ratio."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "idle_fetch_cost.py"), "--waits", "5",
                           "--seconds", "1"], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"^fetch\.wait\.max\.ms=5: stream process [\d.]+% of a core", done.stdout, re.M), done.stdout
    assert re.search(r"^fetch\.wait\.max\.ms=3 \(default\): ", done.stdout, re.M), done.stdout
    assert re.search(r"^ratio: [\d.]+ ", done.stdout, re.M), done.stdout
