"""Issue 42: an outage reaches the stream's `error` within 30 s when the poll loop is idle (no records, no commits
pending) and librdkafka hints at nothing (tests/support/quiet_cluster mutes its error callback in the host and its
stream processes): the quiet watchdog (health.py) probes the cluster. Through a real host on the embedded cluster,
every broker set down. Before the watchdog the error stayed empty."""
from __future__ import annotations

import httpx
import pytest
from host_helpers import HostProcess
from outage_helpers import caught_up_stream, outage_shown
from paths import ROOT, SUPPORT
from stream_helpers import wait_until


@pytest.fixture
def quiet_host(tmp_path):
    process = HostProcess(tmp_path / "state", env={
        "PYTHONPATH": f"{SUPPORT / 'quiet_cluster'}:{SUPPORT}:{ROOT}"}).start()
    yield process
    process.stop()


def test_an_idle_stream_shows_a_quiet_outage_within_30_s_and_clears_when_the_cluster_answers(
        quiet_host, kafka, embedded_kafka):
    with httpx.Client(base_url=quiet_host.url, timeout=90) as api:
        name, _ = caught_up_stream(api, kafka, 5, "q")   # idle, nothing owed
        with outage_shown(api, name, embedded_kafka) as info:
            assert info["status"] == "running", info
        wait_until(lambda: api.get(f"/streams/{name}").json()["error"] is None, 60, what="cleared: the cluster answers")
        api.delete(f"/streams/{name}")
