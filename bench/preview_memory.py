"""A host's memory under concurrent previews of large messages (issue 26), against a real host.

Twelve clients at once ask for a preview (`POST /streams/{name}/check`) of ten
500 kB messages. Two hosts in the same run: one with the default cap on
concurrent previews (MGSTREAMS_MAX_PREVIEWS, 2: the rest get 503 naming it), one
with the cap raised to twelve (the baseline: every preview runs). Each line
gives the host's RSS before, at its peak and two seconds after; the ratio is
the capped host's peak over the baseline's.

    .venv/bin/python bench/preview_memory.py [--clients 12] [--messages 40] [--size 500000]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import tempfile
import threading
import time
from pathlib import Path

import httpx
from confluent_kafka import Producer

from mgstreams.embedded_kafka import EmbeddedKafka
from mgstreams.host_process import HostProcess


def rss_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmRSS:"))


def run(bootstrap: str, topic: str, cap: int, clients: int, size: int) -> tuple[list[int], int, int, int]:
    state = Path(tempfile.mkdtemp(prefix="preview-bench-")) / "state"
    host = HostProcess(state, env={"MGSTREAMS_MAX_PREVIEWS": str(cap)}).start()
    try:
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {host.token}"}
        with httpx.Client(base_url=host.url, headers=headers, timeout=120) as api:
            created = api.post("/streams", json={"name": "big", "topics": [topic], "bootstrap_servers": bootstrap,
                                                 "sink": "null://", "configs": {"fetch.message.max.bytes": 2 * size}})
            assert created.status_code == 201, created.text
            time.sleep(1)
            before = peak = rss_mb(host.proc.pid)
            done = threading.Event()

            def watch():
                nonlocal peak
                while not done.is_set():
                    peak = max(peak, rss_mb(host.proc.pid))
                    time.sleep(0.05)
            threading.Thread(target=watch, daemon=True).start()

            def preview(_):
                return api.post("/streams/big/check", json={"offset": {f"{topic}:0": 0}, "limit": 10,
                                                            "timeout_ms": 60_000}).status_code
            with concurrent.futures.ThreadPoolExecutor(clients) as pool:
                statuses = sorted(pool.map(preview, range(clients)))
            time.sleep(2)
            done.set()
            return statuses, before, peak, rss_mb(host.proc.pid)
    finally:
        host.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--messages", type=int, default=40)
    parser.add_argument("--size", type=int, default=500_000)
    args = parser.parse_args()
    with EmbeddedKafka(brokers=1) as cluster:
        topic = "big"
        cluster.create_topic(topic, 1)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "message.max.bytes": 2 * args.size})
        for _ in range(args.messages):
            producer.produce(topic, b"x" * args.size, partition=0)
        producer.flush(30)
        results = {}
        for label, cap in (("baseline (cap = clients)", args.clients), ("capped (default 2)", 2)):
            statuses, before, peak, after = results[label] = run(cluster.bootstrap_servers, topic, cap,
                                                                 args.clients, args.size)
            print(f"{label}: {statuses.count(200)} served, {statuses.count(503)} refused (503); "
                  f"host RSS before {before} MB, peak {peak} MB, after {after} MB")
        baseline, capped = results["baseline (cap = clients)"], results["capped (default 2)"]
        print(f"ratio: {capped[2] / baseline[2]:.2f} (peak RSS, capped / baseline)")


if __name__ == "__main__":
    main()
