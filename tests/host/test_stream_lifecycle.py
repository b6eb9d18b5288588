"""A stream's lifecycle through a real host: lookup and lock are one step, so a dropped stream can never be
started or restarted, and of two concurrent DELETEs the second is a 404.

Each round creates and starts a stream writing a cypherl file, then sends a DELETE followed by four
`PUT .../start` 20 ms apart (and a second DELETE at once). Afterwards the API lists no stream, the host has
no stream process left, and messages produced after the drop are written by nobody.
"""
from __future__ import annotations

import threading
import time
import uuid

import httpx
import psutil
import pytest
from stream_helpers import FAST_REJOIN, delivered_from_file, wait_until

pytestmark = pytest.mark.usefixtures("quick_rebalance")
ROUNDS = 20


def _stream_processes(host) -> list[psutil.Process]:
    """The host's children that run streams (spawned interpreters), not multiprocessing's resource tracker."""
    out = []
    for child in psutil.Process(host.proc.pid).children(recursive=True):
        try:
            cmdline = " ".join(child.cmdline())
        except psutil.NoSuchProcess:
            continue
        if "multiprocessing.spawn" in cmdline and "resource_tracker" not in cmdline:
            out.append(child)
    return out


def test_a_drop_racing_starts_leaves_no_process_and_the_second_delete_is_404(host, kafka, tmp_path):
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 5, partitions=1)
    api = httpx.Client(base_url=host.wait_ready(), timeout=60)
    deletes: list[int] = []
    for round_ in range(ROUNDS):
        out = tmp_path / f"out{round_}.cypherl"
        name = f"race{round_}"
        created = api.post("/streams", json={
            "name": name, "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers,
            "transform": "stream_helpers.offsets_transform", "sink": f"cypherl://{out}",
            "consumer_group": f"g_{uuid.uuid4().hex[:10]}", "configs": FAST_REJOIN, "batch_interval_ms": 20})
        assert created.status_code == 201, created.text
        assert api.put(f"/streams/{name}/start").status_code == 200
        wait_until(lambda out=out: len(delivered_from_file(out)) == 5, what=f"round {round_}: the first messages")

        answers: dict[str, list[int]] = {"delete": [], "start": []}

        def delete(name=name, answers=answers):
            answers["delete"].append(api.delete(f"/streams/{name}").status_code)

        def starts(name=name, answers=answers):
            for _ in range(4):
                answers["start"].append(api.put(f"/streams/{name}/start").status_code)
                time.sleep(0.02)

        threads = [threading.Thread(target=delete), threading.Thread(target=starts), threading.Thread(target=delete)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(answers["delete"]) == [200, 404], answers
        assert set(answers["start"]) <= {404, 409}, answers   # never started again (409: still running then)
        deletes += answers["delete"]
        assert name not in [s["name"] for s in api.get("/streams").json()]
    kafka.produce(topic, 5, partitions=1)
    time.sleep(2.0)
    assert _stream_processes(host) == [], "a process runs for a stream the API no longer lists"
    assert all(len(delivered_from_file(tmp_path / f"out{r}.cypherl")) == 5 for r in range(ROUNDS)), \
        "a dropped stream wrote messages produced after its drop"
    assert deletes.count(200) == ROUNDS and deletes.count(404) == ROUNDS
