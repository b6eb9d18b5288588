"""How long a host takes to show a dead cluster (every stream's lag verdict ERR) after all its brokers go down,
against how long it takes to show a produce in the lag (the sampler's ordinary latency), in one run.

    .venv/bin/python bench/outage_shown.py               # 4 streams, 3 runs
    .venv/bin/python bench/outage_shown.py --streams 8 --runs 5

Issue 46's floor: shown within 30 s (the lag sample interval here is 1 s, as in the test). The behaviour (ERR
everywhere, lag not known, /health degraded) is tests/host/test_outages_host.py's, which waits for the state;
the figure lives here, where a loaded machine cannot fail a test with it.

Prints each median, `floor: 30 s` and `ratio: X` (outage shown / produce shown).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FLOOR_S = 30.0
INTERVAL_S = 1.0


def until(check, timeout: float, what: str) -> float:
    """Seconds until `check()` holds (polled every 50 ms); exits naming `what` past `timeout`."""
    began = time.monotonic()
    while not check():
        if time.monotonic() - began > timeout:
            sys.exit(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.05)
    return time.monotonic() - began


def one_run(streams: int) -> tuple[float, float]:
    import httpx
    from confluent_kafka import Producer

    from mgstreams.embedded_kafka import EmbeddedKafka
    from mgstreams.host_process import HostProcess

    with EmbeddedKafka(brokers=3, initial_rebalance_delay_ms=200) as kafka, tempfile.TemporaryDirectory() as tmp, \
            HostProcess(Path(tmp) / "state", extra_args=("--no-token", "--lag-sample-interval", str(INTERVAL_S))
                        ) as host, httpx.Client(base_url=host.url, timeout=60) as api:
        topic = f"outage_{uuid.uuid4().hex[:8]}"
        kafka.create_topic(topic, partitions=2)
        names = [f"s{i}" for i in range(streams)]
        for name in names:
            created = api.post("/streams", json={"name": name, "topics": [topic], "sink": "null://",
                                                 "bootstrap_servers": kafka.bootstrap_servers,
                                                 "consumer_group": f"outage_{name}_{uuid.uuid4().hex[:6]}"})
            assert created.status_code == 201, created.text
            api.put(f"/streams/{name}/start")
        lags = lambda: [api.get(f"/streams/{n}/lag").json() for n in names]  # noqa: E731
        until(lambda: all(v["stream_status"] == "running" and v["sampled_at"] for v in lags()), 120, "running")
        producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 0})
        before = {v["name"]: v["partitions"] for v in lags()}
        for i in range(20):
            producer.produce(topic, value=b'{"i": %d}' % i, partition=i % 2)
        producer.flush(30)
        produce_s = until(lambda: all(v["partitions"] != before[v["name"]] for v in lags()), 120, "produce shown")
        for broker in (1, 2, 3):
            kafka.broker_down(broker)
        outage_s = until(lambda: all(v["status"] == "ERR" for v in lags()), 300, "outage shown")
        for broker in (1, 2, 3):
            kafka.broker_up(broker)
        return produce_s, outage_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = [one_run(args.streams) for _ in range(args.runs)]
    produce_s = statistics.median(r[0] for r in runs)
    outage_s = statistics.median(r[1] for r in runs)
    print(f"a produce shown in the lag: median {produce_s:.1f} s over {args.runs} runs")
    print(f"a dead cluster shown (every stream ERR): median {outage_s:.1f} s over {args.runs} runs, "
          f"worst {max(r[1] for r in runs):.1f} s")
    print(f"floor: {FLOOR_S:.0f} s ({'met' if outage_s < FLOOR_S else 'NOT met'})")
    print(f"ratio: {outage_s / produce_s:.1f}")


if __name__ == "__main__":
    main()
