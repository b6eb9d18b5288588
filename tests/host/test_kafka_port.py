"""`mgstreams kafka --port` (issue 46): the embedded cluster at a fixed address, so that killed and started again it
is where its streams look for it, and they go on (the reporter's outage test: "with the embedded Kafka killed")."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

import httpx
from cli_helpers import mgstreams
from paths import ROOT
from ports import free_port
from stream_helpers import FAST_REJOIN, delivered_from_file, wait_until


def kafka_on(port: int) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-m", "mgstreams", "kafka", "--port", str(port),
                                "--partitions-topic", "orders:1"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True, cwd=ROOT, env={**os.environ})
    assert process.stdout.readline().strip() == f"127.0.0.1:{port}"   # its ready line: the fixed address
    return process


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0
    process.stdout.close()


def test_a_cluster_started_again_on_its_port_is_found_by_the_stream(host, tmp_path):
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    out = tmp_path / "out.cypherl"
    cluster = kafka_on(port)
    try:
        assert mgstreams("kafka", "produce", "orders", "--bootstrap", bootstrap,
                         stdin="".join(f'{{"i": {i}}}\n' for i in range(3))).returncode == 0
        with httpx.Client(base_url=host.url, timeout=60) as api:
            created = api.post("/streams", json={
                "name": "fixed", "topics": ["orders"], "bootstrap_servers": bootstrap,
                "transform": "stream_helpers.offsets_transform", "sink": f"cypherl://{out}", "batch_interval_ms": 20,
                "consumer_group": f"fixed_{uuid.uuid4().hex[:8]}", "configs": FAST_REJOIN})
            assert created.status_code == 201, created.text
            assert api.put("/streams/fixed/start").status_code == 200
            wait_until(lambda: len(delivered_from_file(out)) == 3, 60, what="3 from the first run")
            stop(cluster)
            wait_until(lambda: api.get("/streams/fixed/lag").json()["status"] == "ERR", 60, what="the outage seen")
            cluster = kafka_on(port)   # the same address: the stream finds it without being told
            assert mgstreams("kafka", "produce", "orders", "--bootstrap", bootstrap,
                             stdin="".join(f'{{"i": {i}}}\n' for i in range(5))).returncode == 0
            # its log starts empty (memory): the stream reads the new log's five records, from its offset 0
            wait_until(lambda: [o for _, _, o in delivered_from_file(out)][3:] == [0, 1, 2, 3, 4], 90,
                       what="the records of the cluster started again",
                       describe=lambda: ([o for _, _, o in delivered_from_file(out)],
                                         api.get("/streams/fixed").json().get("error")))
            api.delete("/streams/fixed")
    finally:
        if cluster.poll() is None:
            stop(cluster)
