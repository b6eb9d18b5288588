"""Each running stream in a process of its own: a crash stays inside its stream.

Every test runs a real `mgstreams serve` and kills real processes: a stream's
process by SIGKILL (what the OOM killer sends), a transformation that calls
os.abort() (what a C extension failing an assertion does), the host itself by
SIGKILL. The other stream, the API and the offsets must not notice more than
the at-least-once contract allows: duplicates only from the one batch that was
written but not committed when the process died.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from functools import partial

import configs
import psutil
import pytest
from host_helpers import HostProcess, http
from paths import ROOT
from stream_helpers import FAST_REJOIN, by_partition, delivered_from_file, wait_until

BATCH = 20


pytestmark = pytest.mark.usefixtures("quick_rebalance")   # see conftest
# each stream crashes on demand (stream_helpers.crashing_transform) and writes a cypherl file
stream_body = partial(configs.stream_body, group="proc", transform="stream_helpers.crashing_transform",
                      batch_size=BATCH, batch_interval_ms=20, configs=FAST_REJOIN)


def gone(pid: int) -> bool:
    """Exited (a zombie waiting for whoever adopted it counts: it holds no consumer any more)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def offsets_of(out) -> dict[int, list[int]]:
    return {p: offsets for (_, p), offsets in by_partition(delivered_from_file(out)).items()}


class Producer(threading.Thread):
    """Produces to every topic, a few messages at a time, until stopped; counts what it produced."""

    def __init__(self, kafka, topics: list[str], partitions: int):
        super().__init__(daemon=True)
        self.kafka, self.topics, self.partitions = kafka, topics, partitions
        self.produced = 0
        self.halt = threading.Event()

    def run(self):
        while not self.halt.is_set():
            for topic in self.topics:
                self.kafka.produce(topic, self.partitions * 5, partitions=self.partitions)
            self.produced += self.partitions * 5
            time.sleep(0.05)

    def stop(self) -> int:
        self.halt.set()
        self.join(30)
        return self.produced // self.partitions   # per partition


def test_a_sigkilled_stream_process_shows_the_signal_restarts_and_loses_nothing_while_the_other_goes_on(
        host, kafka, tmp_path):
    topics = {"a": kafka.new_topic(partitions=3), "b": kafka.new_topic(partitions=3)}
    outs = {name: tmp_path / f"{name}.cypherl" for name in topics}
    producer = Producer(kafka, list(topics.values()), 3)
    with http(host) as api:
        for name, topic in topics.items():
            api.post("/streams", json=stream_body(kafka, topic, outs[name], name=name)).raise_for_status()
            api.put(f"/streams/{name}/start").raise_for_status()
        wait_until(lambda: all(api.get(f"/streams/{n}").json()["status"] == "running" for n in topics), 60,
                   what="both streams running")
        before = {n: api.get(f"/streams/{n}").json() for n in topics}
        assert len({before["a"]["pid"], before["b"]["pid"], host.proc.pid}) == 3, "one process per stream"
        assert all(info["rss_bytes"] > 10 * 2 ** 20 and info["restarts"] == 0 for info in before.values())
        assert psutil.Process(before["a"]["pid"]).ppid() == host.proc.pid
        described = subprocess.run([sys.executable, "-m", "mgstreams", "--url", host.url, "describe", "a"],
                                   capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert f"pid {before['a']['pid']}" in described.stdout, described.stdout + described.stderr

        producer.start()
        wait_until(lambda: len(delivered_from_file(outs["a"])) >= 100, 60, what="stream a consuming")
        os.kill(before["a"]["pid"], signal.SIGKILL)
        killed_at = time.monotonic()
        b_at_kill = len(delivered_from_file(outs["b"]))
        # the API answers during the crash, and the stream says what happened within a second or two
        wait_until(lambda: api.get("/streams/a").json()["status"] == "error", 2, interval=0.02,
                   what="stream a in error")
        crashed = api.get("/streams/a").json()
        assert "killed by signal 9 (SIGKILL)" in crashed["error"] and "restarting in" in crashed["error"]
        assert crashed["pid"] is None
        assert api.get("/health").json()["status"] == "healthy"
        assert api.get("/streams/b").json()["status"] == "running"
        wait_until(lambda: api.get("/streams/a").json()["status"] == "running", 60, what="stream a restarted")
        b_during = len(delivered_from_file(outs["b"]))
        after = {n: api.get(f"/streams/{n}").json() for n in topics}
        assert after["a"]["pid"] not in (None, before["a"]["pid"]) and after["a"]["restarts"] == 1
        assert after["a"]["error"] is None
        assert after["b"]["pid"] == before["b"]["pid"] and after["b"]["restarts"] == 0
        metrics = api.get("/metrics").text
        assert 'mgstreams_stream_restarts{stream="a"} 1.0' in metrics
        assert 'mgstreams_stream_restarts{stream="b"} 0.0' in metrics
        assert re.search(r'^mgstreams_stream_resident_memory_bytes\{stream="b"\} [1-9]', metrics, re.M)
        assert b_during > b_at_kill, "stream b went on delivering while stream a was down"

        per_partition = producer.stop()
        expected = {p: list(range(per_partition)) for p in range(3)}
        for name in topics:
            wait_until(lambda name=name: {p: sorted(set(o)) for p, o in offsets_of(outs[name]).items()} == expected, 60,
                       what=f"every produced offset delivered by stream {name}")
        b = offsets_of(outs["b"])
        assert b == expected, "stream b: exactly once, in order, no gap"
        a = delivered_from_file(outs["a"])
        duplicates = len(a) - len(set(a))
        assert duplicates <= BATCH, f"{duplicates} duplicates: more than the one uncommitted batch"
        assert time.monotonic() - killed_at < 60
    assert "Traceback" not in host.log()


def test_a_transformation_that_aborts_is_restarted_and_the_message_delivered(host, kafka, tmp_path):
    topic = kafka.new_topic(partitions=1)
    out = tmp_path / "out" / "out.cypherl"   # the transformation writes its marker in its sink's directory,
    marker = out.parent / "aborted-once"      # not beside the host's state directory (the sandbox denies that)
    out.parent.mkdir()
    kafka.produce(topic, 30, partitions=1,
                  payload=lambda i: f"abort:{marker}".encode() if i == 10 else f'{{"i": {i}}}'.encode())
    with http(host) as api:
        api.post("/streams", json=stream_body(kafka, topic, out)).raise_for_status()
        api.put("/streams/orders/start").raise_for_status()
        wait_until(lambda: "SIGABRT" in (api.get("/streams/orders").json()["error"] or ""), 30, interval=0.02,
                   what="the abort reported")
        assert "killed by signal 6 (SIGABRT); restarting in 1 s (restart 1)" in \
            api.get("/streams/orders").json()["error"]
        wait_until(lambda: sorted(set(offsets_of(out).get(0, []))) == list(range(30)), 60,
                   what="every message delivered, the one that aborted included")
        info = api.get("/streams/orders").json()
        assert info["status"] == "running" and info["restarts"] == 1 and marker.exists()
    assert "Traceback" not in host.log()


def test_with_restart_never_an_aborting_stream_stays_in_error_naming_the_abort(host, kafka, tmp_path):
    topic = kafka.new_topic(partitions=1)
    out = tmp_path / "out.cypherl"
    kafka.produce(topic, 5, partitions=1, payload=lambda i: b"abort:always" if i == 3 else b"{}")
    with http(host) as api:
        api.post("/streams", json=stream_body(kafka, topic, out, restart="never")).raise_for_status()
        assert api.get("/streams/orders").json()["restart"] == "never"
        api.put("/streams/orders/start").raise_for_status()
        wait_until(lambda: api.get("/streams/orders").json()["status"] == "error", 30, what="the abort")
        time.sleep(3)   # longer than the first restart backoff: nothing restarts it
        info = api.get("/streams/orders").json()
        assert info["status"] == "error" and info["pid"] is None and info["restarts"] == 0
        assert info["error"] == "stream process killed by signal 6 (SIGABRT); not restarted (restart: never)"
        assert offsets_of(out) == {} or max(offsets_of(out)[0]) < 3   # nothing at or past the poison message
        # the host and its API are untouched; the stream can be stopped and is then quiet
        assert api.get("/streams/orders/offsets").status_code == 200
        stopped = api.put("/streams/orders/stop").json()
        assert stopped["status"] == "error" and "not restarted" not in stopped["error"]
        bad = api.post("/streams", json=stream_body(kafka, topic, out, restart="sometimes", name="other"))
        assert bad.status_code == 400 and bad.json() == {
            "error": "restart: expected one of 'on-failure', 'never', got 'sometimes'"}


def test_a_preview_whose_transformation_aborts_ends_the_preview_not_the_host(host, kafka, tmp_path):
    """CHECK STREAM runs the stream's transformation too: in a stream host it runs in a process of its own."""
    topic = kafka.new_topic(partitions=1)
    other_topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 6, partitions=1, payload=lambda i: b"abort:always" if i == 3 else b"{}")
    kafka.produce(other_topic, 20, partitions=1)
    other_out = tmp_path / "other.cypherl"
    with http(host) as api:
        api.post("/streams", json=stream_body(kafka, topic, tmp_path / "out.cypherl")).raise_for_status()
        api.post("/streams", json=stream_body(kafka, other_topic, other_out, name="other")).raise_for_status()
        api.put("/streams/other/start").raise_for_status()
        wait_until(lambda: offsets_of(other_out).get(0) == list(range(20)), 30, what="the other stream delivering")
        other_pid = api.get("/streams/other").json()["pid"]
        before = api.get("/streams/orders").json()

        crashed = api.post("/streams/orders/check", json={"offset": "earliest", "limit": 10})
        assert crashed.status_code == 409, crashed.text
        assert crashed.json()["error"] == ("check: the preview of transformation 'stream_helpers.crashing_transform':"
                                           " its process killed by signal 6 (SIGABRT); nothing was changed")
        assert host.proc.poll() is None and api.get("/health").status_code == 200
        past = api.post("/streams/orders/check", json={"offset": {f"{topic}:0": 4}, "limit": 10})
        assert past.status_code == 200 and [r["offset"] for r in past.json()] == [4, 5]
        assert api.get("/streams/orders").json() == before
        kafka.produce(other_topic, 5, partitions=1)
        wait_until(lambda: offsets_of(other_out).get(0) == list(range(25)), 30, what="the other stream going on")
        assert api.get("/streams/other").json()["pid"] == other_pid
        spawned = [p for p in psutil.Process(host.proc.pid).children(recursive=True)
                   if p.pid != other_pid and "spawn_main" in " ".join(p.cmdline())]
        assert all(gone(p.pid) for p in spawned), "no preview process is left behind"


def test_a_transformation_module_that_aborts_at_import_is_refused_at_create_and_the_host_goes_on(tmp_path, kafka):
    """Creating a stream imports its transformation to check it: a stream host does that in a child process."""
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "aborts_at_import.py").write_text("import os\nos.abort()\n\ndef transform(messages):\n    return []\n")
    (modules / "fine.py").write_text("def transform(messages):\n    return []\n")
    topic = kafka.new_topic(partitions=1)
    host = HostProcess(tmp_path / "state", env={"MGSTREAMS_QUERY_MODULES_DIR": str(modules)}).start()
    try:
        with http(host) as api:
            refused = api.post("/streams", json=stream_body(kafka, topic, tmp_path / "out.cypherl",
                                                            transform="aborts_at_import.transform"))
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"] == ("transform: importing 'aborts_at_import.transform': its process "
                                               "killed by signal 6 (SIGABRT); nothing was changed")
            assert host.proc.poll() is None and api.get("/streams").json() == []
            api.post("/streams", json=stream_body(kafka, topic, tmp_path / "out.cypherl",
                                                  transform="fine.transform")).raise_for_status()
            assert [s["name"] for s in api.get("/streams").json()] == ["orders"]
    finally:
        host.stop()


def test_stream_processes_end_with_their_host_sigterm_or_sigkill(tmp_path, kafka):
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 100, partitions=2)
    for how in ("sigterm", "sigkill"):
        host = HostProcess(tmp_path / f"state-{how}").start()
        try:
            with http(host) as api:
                for name in ("one", "two"):
                    api.post("/streams", json=stream_body(kafka, topic, tmp_path / f"{how}-{name}.cypherl", name=name,
                                                          configs={"group.protocol": "consumer"})
                             ).raise_for_status()
                    api.put(f"/streams/{name}/start").raise_for_status()
                pids = [api.get(f"/streams/{n}").json()["pid"] for n in ("one", "two")]
            assert all(pid and not gone(pid) for pid in pids)
            if how == "sigterm":
                assert host.terminate(timeout=30) == 0
                assert all(gone(pid) for pid in pids), "SIGTERM: the host waits for its streams"
            else:
                host.kill()
                wait_until(lambda pids=pids: all(gone(pid) for pid in pids), 15, what="no stream process left")
        finally:
            host.stop()


def test_a_stream_process_that_does_not_stop_in_time_is_killed_and_the_stream_says_so(tmp_path, kafka):
    topic = kafka.new_topic(partitions=1)
    out = tmp_path / "out.cypherl"
    host = HostProcess(tmp_path / "state", extra_args=("--stop-timeout", "1")).start()
    try:
        with http(host) as api:
            api.post("/streams", json=stream_body(kafka, topic, out)).raise_for_status()
            api.put("/streams/orders/start").raise_for_status()
            wait_until(lambda: api.get("/streams/orders").json()["status"] == "running", 30, what="running")
            pid = api.get("/streams/orders").json()["pid"]
            kafka.produce(topic, 1, partitions=1, payload=lambda i: b"sleep:600")
            time.sleep(1.0)   # the batch is now in its transformation
            started = time.monotonic()
            stopped = api.put("/streams/orders/stop")
            assert time.monotonic() - started < 15
            assert stopped.status_code == 200, stopped.text
            info = stopped.json()
            assert info["status"] == "stopped" and info["pid"] is None
            assert "did not stop within 1 s and was killed" in info["error"]
            assert gone(pid)
            # the stream can start again, and starts from its last commit: the slow message is read again
            assert api.put("/streams/orders/start").json()["status"] in ("starting", "running")
    finally:
        host.stop()


def test_an_offset_change_made_while_the_stream_process_is_down_is_applied_when_it_restarts(host, kafka, tmp_path):
    """The pending-offset guarantee across a crash: the change is stored, and the restarted process applies it at
    its first assignment, so the first message it delivers from that partition is the requested one."""
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 40, partitions=2)
    out = tmp_path / "out.cypherl"
    with http(host) as api:
        api.post("/streams", json=stream_body(kafka, topic, out)).raise_for_status()
        api.put("/streams/orders/start").raise_for_status()
        wait_until(lambda: len(delivered_from_file(out)) == 40, 60, what="the first 40 messages")
        # committed too (after the write: a kill before it would replay partition 0 from its start, rightly)
        wait_until(lambda: [p["committed_offset"] for p in api.get("/streams/orders/offsets").json()] == [20, 20],
                   30, what="both partitions committed at 20")
        os.kill(api.get("/streams/orders").json()["pid"], signal.SIGKILL)
        wait_until(lambda: api.get("/streams/orders").json()["status"] == "error", 5, interval=0.02, what="error")
        answer = api.patch("/streams/orders/offsets", json={"offset": {f"{topic}:1": 5}, "timeout_ms": 500})
        changes = answer.json()
        assert answer.status_code == 200, answer.text
        assert [(c["partition"], c["offset"], c["status"]) for c in changes] == [(1, 5, "pending")]
        since = len(delivered_from_file(out))
        wait_until(lambda: api.get("/streams/orders").json()["status"] == "running", 60, what="restarted")
        wait_until(lambda: len(delivered_from_file(out)) >= since + 15, 60, what="the replay from offset 5")
        replay = by_partition(delivered_from_file(out)[since:])
        assert replay.get((topic, 1)) == list(range(5, 20)) and (topic, 0) not in replay
        history = api.get("/streams/orders/history").json()
        assert [(h["partition"], h["offset"], h["status"]) for h in history] == [(1, 5, "applied")]
