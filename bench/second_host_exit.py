"""How long a second `mgstreams serve` on a state directory another host holds takes to exit, against the same
interpreter's `mgstreams --help` (the start-up both pay), in one run.

    .venv/bin/python bench/second_host_exit.py              # 5 runs of each
    .venv/bin/python bench/second_host_exit.py --runs 10

The refusal must come from the state directory's lock, before anything that waits (Kafka, the stream processes,
the port): the ratio stays near 1. A test timed it against a fixed 5 s and failed on a loaded machine (10.6 s);
the timing lives here, the behaviour (exit 1, one line naming the first host's pid) in tests/host/test_host.py.

Prints each median and `ratio: X` (second host's exit / --help).
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mgstreams.host_process import HostProcess  # noqa: E402


def timed(args: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "mgstreams", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    return time.monotonic() - began, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        with HostProcess(state, extra_args=("--no-token",)):
            baseline, refused = [], []
            for _ in range(args.runs):
                baseline.append(timed(["--help"])[0])
                took, second = timed(["serve", "--state-dir", str(state), "--listen", "127.0.0.1:0"])
                if second.returncode != 1 or "one host per state directory" not in second.stderr:
                    sys.exit(f"the second host did not refuse the state directory: {second.returncode} "
                             f"{second.stderr!r}")
                refused.append(took)
    help_s, second_s = statistics.median(baseline), statistics.median(refused)
    print(f"mgstreams --help: median {help_s:.2f} s over {args.runs} runs")
    print(f"second host's exit: median {second_s:.2f} s over {args.runs} runs")
    print(f"ratio: {second_s / help_s:.2f}")


if __name__ == "__main__":
    main()
