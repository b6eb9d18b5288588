"""`engine: spark` through a real host (`mgstreams serve` child): a stream created by the API runs as a Structured
Streaming query on a local session the host starts (or on the suite's Spark Connect server), and everything an
operator does to a host stream works on it, through the API and the CLI:
- set_offset is applied between micro-batches; a second call before the first is applied supersedes it; a cancel
  (`DELETE /streams/{name}/pending`) of a change not yet taken means it is never applied; a revert moves back;
- describe, /metrics, /ui and `mgstreams top` show the query's id, last batch and rates;
- a host restart resumes the query from its checkpoint, and the history says so where the group's committed
  offsets say otherwise; a failed query (a sink that refuses) is the stream's error;
- the backfill hand-off (`mgstreams backfill --stream NAME --until committed`, then start) loads every offset once.
Bad engine values are refused with a 400 naming the field and the value (and by `mgstreams create --engine
spark`). docs/how-to/spark-engine.md describes this.

A micro-batch is held while a file exists (stream_helpers.held_offsets_transform), so that calls land "before
the next micro-batch is planned" by a state, not by timing: Spark plans the next micro-batch only once the last
one is done.
"""
from __future__ import annotations

import json
import re
import socket
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from cli_helpers import invoke, mgstreams
from host_helpers import HostProcess
from kafka_records import commit_as
from stream_helpers import by_partition, delivered_from_file, wait_until

from mgstreams.query_module import STREAMS_MODULE, QueryModule
from stream_registry.errors import StreamError

pytestmark = pytest.mark.spark
WAIT_S = 300   # a micro-batch of a loaded 2-core machine, or a Spark session starting: minutes, not seconds


class Hold:
    """The held micro-batch: `hold()` before records are produced, `wait()` until their batch is in the
    transformation (and held there), `release()` lets it finish."""

    def __init__(self, path: Path):
        self.path, self.seen = path, Path(f"{path}.seen")

    def hold(self) -> None:
        self.path.touch()
        self.seen.unlink(missing_ok=True)

    def wait(self) -> None:
        wait_until(self.seen.exists, WAIT_S, 0.1, "the micro-batch held in the transformation")

    def release(self) -> None:
        self.path.unlink()


def offsets_of(out: Path, topic: str) -> list[int]:
    return by_partition(delivered_from_file(out)).get((topic, 0), [])


def set_offset(api: httpx.Client, offset, timeout_ms: int = 240_000) -> list[dict]:
    answer = api.patch("/streams/sp/offsets", json={"offset": offset, "timeout_ms": timeout_ms})
    assert answer.status_code in (200, 202), answer.text
    return answer.json()


def words(text: str) -> str:
    """A command's output with its lines joined (a narrow terminal wraps them)."""
    return " ".join(text.split())


def history(api: httpx.Client) -> list[dict]:
    """The stream's history, newest first."""
    return api.get("/streams/sp/history").json()


def refusals(api: httpx.Client, host, kafka, topic: str, body: dict) -> None:
    for bad, field, value in (({"engine": "flink"}, "engine", "flink"),
                              ({"engine": "spark", "spark.remote": "sc://elsewhere.example:15002"}, "spark.remote",
                               "elsewhere.example"),
                              ({"engine": "spark", "spark.master": "yarn"}, "spark.master", "yarn"),
                              ({"spark.master": "local[2]"}, "spark.master", "local[2]")):
        refused = api.post("/streams", json={**body, **bad})
        assert refused.status_code == 400 and field in refused.text and value in refused.text, refused.text
        assert api.get("/streams/sp").status_code == 404

    cli = invoke("create", "sp", "--topic", topic, "--bootstrap", kafka.bootstrap_servers, "--sink", body["sink"],
                 "--engine", "spark", "--config", "spark.master=yarn", host=host)   # the CLI's way, refused alike
    assert cli.exit_code != 0 and "spark.master" in cli.output and "yarn" in cli.output, cli.output
    assert api.get("/streams/sp").status_code == 404
    with QueryModule(STREAMS_MODULE, host.url, token=host.token) as streams:   # CALL streams.create(..., options)
        with pytest.raises(StreamError, match=r"spark.remote: host 'elsewhere.example' is not one the operator"):
            streams.call("create", "sp", [topic], kafka.bootstrap_servers, body["transform"], body["sink"], "", 4,
                         100, {}, {}, "on-failure", {"engine": "spark", "spark.remote": "sc://elsewhere.example:1"})
    assert api.get("/streams/sp").status_code == 404


@pytest.mark.timeout(1500)
def test_a_spark_stream_through_the_host_moves_shows_its_query_resumes_and_fails(kafka, tmp_path):
    hold = Hold(tmp_path / "hold")
    env = {"MGSTREAMS_TEST_HOLD": str(hold.path)}   # the host's Spark workers inherit it
    host = HostProcess(tmp_path / "state", env=env).start()
    try:
        api = httpx.Client(base_url=host.wait_ready(), timeout=WAIT_S)
        topic = kafka.new_topic(partitions=1)
        kafka.produce(topic, 10, partitions=1)
        out = tmp_path / "spark.cypherl"
        group = f"g_{uuid.uuid4().hex[:10]}"
        body = {"name": "sp", "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers,
                "transform": "stream_helpers.held_offsets_transform", "sink": f"cypherl://{out}",
                "consumer_group": group, "batch_size": 4}
        refusals(api, host, kafka, topic, body)

        created = api.post("/streams", json={**body, "engine": "spark", "spark.master": "local[2]"})
        assert created.status_code == 201, created.text
        assert created.json()["engine"] == "spark"
        altered = api.patch("/streams/sp", json={"engine": "host"})
        assert altered.status_code == 400 and "engine" in altered.text and "checkpoint" in altered.text, altered.text
        assert api.put("/streams/sp/start").status_code == 200
        wait_until(lambda: len(offsets_of(out, topic)) == 10, WAIT_S, 0.5, "the first 10 records",
                   lambda: api.get("/streams/sp").json())

        # set_offset between micro-batches
        [first] = set_offset(api, 3)
        assert (first["status"], first["offset"], first["partition"]) == ("applied", 3, 0), first
        wait_until(lambda: len(offsets_of(out, topic)) == 17, WAIT_S, 0.5, "3..9 again")
        assert offsets_of(out, topic) == [*range(10), *range(3, 10)]

        # two calls before the next micro-batch is planned: the second supersedes the first (each call waits
        # 2 s, time to resolve its target, and answers `pending`: the held micro-batch cannot end meanwhile)
        hold.hold()
        kafka.produce(topic, 1, partitions=1)                  # offset 10, held in the transformation
        hold.wait()
        [a] = set_offset(api, 0, 2000)
        [b] = set_offset(api, 8, 2000)
        assert (a["status"], b["status"]) == ("pending", "pending"), (a, b)
        hold.release()
        wait_until(lambda: len(offsets_of(out, topic)) == 21, WAIT_S, 0.5, "10, then 8..10 (the second call)")
        assert offsets_of(out, topic)[17:] == [10, 8, 9, 10]
        wait_until(lambda: api.get("/streams/sp/pending").json() == [], 60, 0.1, "no change pending")
        rows = history(api)
        assert (rows[0]["change_id"], rows[0]["status"], rows[0]["offset"], rows[0]["previous_offset"]) == \
            (b["change_id"], "applied", 8, 11), rows
        assert not [r for r in rows if r["change_id"] == a["change_id"]], rows   # superseded: never applied

        # a cancel before the next micro-batch: never applied
        hold.hold()
        kafka.produce(topic, 1, partitions=1)                  # offset 11, held
        hold.wait()
        [c] = set_offset(api, 0, 2000)
        assert c["status"] == "pending", c
        cancelled = api.delete("/streams/sp/pending")
        assert cancelled.status_code == 200, cancelled.text
        assert [(r["change_id"], r["offset"]) for r in cancelled.json()] == [(c["change_id"], 0)], cancelled.json()
        hold.release()
        kafka.produce(topic, 1, partitions=1)                  # offset 12: the stream goes on from 11
        wait_until(lambda: len(offsets_of(out, topic)) == 23, WAIT_S, 0.5, "11 and 12")
        assert offsets_of(out, topic)[21:] == [11, 12]
        assert not [r for r in history(api) if r["change_id"] == c["change_id"]]

        # a revert of the first change: back to where it stood (10)
        reverted = api.post(f"/streams/sp/history/{first['change_id']}/revert", json={"timeout_ms": 240_000})
        [back] = reverted.json()
        assert (back["status"], back["offset"]) == ("applied", 10), back
        wait_until(lambda: len(offsets_of(out, topic)) == 26, WAIT_S, 0.5, "10..12 again")
        assert offsets_of(out, topic)[23:] == [10, 11, 12]
        assert history(api)[0]["message"].startswith(f"revert of change {first['change_id']}"), history(api)

        # describe, /metrics, /ui, top: the query's id, last batch and rates
        info = api.get("/streams/sp").json()
        assert info["status"] == "running" and info["error"] is None, info
        spark = info["spark"]
        assert spark["master"] == "local[2]" and spark["query_id"] and spark["last_batch_id"] is not None, spark
        assert {"input_rows_per_second", "processed_rows_per_second", "batch_duration_ms"} <= spark.keys(), spark
        query_id = spark["query_id"]
        metrics = api.get("/metrics").text
        assert re.search(rf'mgstreams_spark_query_info\{{query_id="{query_id}",run_id="[0-9a-f-]+",stream="sp"}} 1\.0',
                         metrics), metrics
        for name in ("last_batch_id", "input_rows_per_second", "processed_rows_per_second",
                     "batch_duration_seconds"):
            assert re.search(rf'mgstreams_spark_{name}\{{stream="sp"}} \d', metrics), (name, metrics)
        assert f"spark query {query_id}, batch " in api.get("/ui").text
        top = invoke("top", "--once", host=host)
        assert top.exit_code == 0 and f"sp: spark query {query_id}, batch " in words(top.output), top.output
        described = invoke("describe", "sp", host=host)
        assert f"spark query {query_id}, batch " in words(described.output), described.output

        # a host restart: the query resumes from its checkpoint (13); the group was moved meanwhile (to 5), and
        # the history says where it resumed and what the group held
        wait_until(lambda: [r["committed_offset"] for r in api.get("/streams/sp/offsets").json()] == [13], 60,
                   0.2, "the group to follow the last micro-batch")
        host.stop()
        commit_as(kafka, group, {(topic, 0): 5})
        kafka.produce(topic, 2, partitions=1)                  # 13, 14 arrive while the host is down
        # the host serves at once; this stream's Spark session and query start meanwhile
        host = HostProcess(tmp_path / "state", env=env).start()
        api = httpx.Client(base_url=host.wait_ready(), timeout=WAIT_S)
        wait_until(lambda: len(offsets_of(out, topic)) == 28, WAIT_S, 0.5, "13 and 14 after the restart",
                   lambda: api.get("/streams/sp").json())
        assert offsets_of(out, topic)[26:] == [13, 14]
        assert api.get("/streams/sp").json()["spark"]["query_id"] == query_id   # the same query, resumed
        realigned = [r for r in history(api) if r["status"] == "realigned"]
        assert [(r["previous_offset"], r["offset"]) for r in realigned] == [(5, 13)], history(api)
        assert "resumes from its checkpoint at 13" in realigned[0]["message"], realigned

        # an onward target (`+1`: from the position the call reads, the last micro-batch done, 15) that the
        # query has read past when the change applies (the held micro-batch ends past 16): never a move back,
        # as on a host stream; the partition stays where it stood, and the answer and the history say so
        hold.hold()
        kafka.produce(topic, 5, partitions=1)                  # 15..19, one micro-batch, held
        hold.wait()
        [onward] = set_offset(api, "+1", 2000)
        assert (onward["status"], onward["offset"]) == ("pending", 16), onward
        hold.release()
        kafka.produce(topic, 1, partitions=1)                  # 20: the stream goes on from where it stood
        wait_until(lambda: 20 in offsets_of(out, topic)[28:], WAIT_S, 0.5, "15..20",
                   lambda: api.get("/streams/sp").json())
        assert offsets_of(out, topic)[28:] == list(range(15, 21)), offsets_of(out, topic)   # nothing again
        [stayed] = [r for r in history(api) if r["change_id"] == onward["change_id"]]
        assert stayed["status"] == "applied" and stayed["offset"] == stayed["previous_offset"] > 16, stayed
        assert "never goes back" in stayed["message"], stayed

        # a sink that refuses: the query fails, and that is the stream's error
        out.rename(tmp_path / "spark-before.cypherl")
        out.mkdir()                                            # the cypherl file cannot be opened any more
        kafka.produce(topic, 1, partitions=1)
        wait_until(lambda: api.get("/streams/sp").json()["status"] == "error", WAIT_S, 0.5, "the failed query",
                   lambda: api.get("/streams/sp").json())
        failed = api.get("/streams/sp").json()
        assert failed["error"].startswith("spark: the query failed:"), failed
        assert "spark: the query failed" in words(invoke("describe", "sp", host=host).output)
    finally:
        host.stop()


@pytest.mark.timeout(1200)
def test_a_spark_connect_stream_through_the_host_takes_over_from_a_backfill_exactly(spark_connect, kafka,
                                                                                      tmp_path):
    """On the suite's Spark Connect server (`spark.remote`; the server's workers import the product, so the
    transformation is a built-in one). The hand-off: offsets set on the stopped stream are its resume point, the
    backfill ends there, the live Spark stream starts there: every offset once."""
    host = HostProcess(tmp_path / "state").start()
    try:
        api = httpx.Client(base_url=host.wait_ready(), timeout=WAIT_S)
        topic = kafka.new_topic(partitions=2)
        kafka.produce(topic, 20, partitions=2)                 # offsets 0..9 on each partition
        live, backfilled, report = tmp_path / "live.cypherl", tmp_path / "backfill", tmp_path / "report.json"
        body = {"name": "sp", "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers,
                "transform": "stream_registry.builtin_transformations.create_messages", "sink": f"cypherl://{live}",
                "consumer_group": f"g_{uuid.uuid4().hex[:10]}", "batch_size": 4, "engine": "spark",
                "spark.remote": spark_connect.url}
        created = api.post("/streams", json=body)
        assert created.status_code == 201, created.text
        pending = api.patch("/streams/sp/offsets", json={"offset": {f"{topic}:0": 4, f"{topic}:1": 7}}).json()
        assert sorted((c["partition"], c["offset"], c["status"]) for c in pending) == [(0, 4, "pending"),
                                                                                      (1, 7, "pending")]
        done = mgstreams("backfill", "--stream", "sp", "--state-dir", str(host.state_dir), "--engine", "local",
                         "--from", "earliest", "--until", "committed", "--sink", f"cypherl://{backfilled}",
                         "--batch-size", "30", "--report", str(report), host=host, timeout=WAIT_S)
        assert done.returncode == 0, done.stderr
        assert "committed: stream 'sp''s resume point" in done.stderr
        ends: dict[int, int] = {}
        for r in json.loads(report.read_text())["plan"]:
            ends[r["partition"]] = max(ends.get(r["partition"], 0), r["until_offset"])
        assert ends == {0: 4, 1: 7}, ends

        assert api.put("/streams/sp/start").status_code == 200
        wait_until(lambda: len(delivered_from_file(live)) == 9, WAIT_S, 0.5, "6 + 3 records live",
                   lambda: api.get("/streams/sp").json())
        loaded = [key for path in sorted(backfilled.glob("*.cypherl")) for key in delivered_from_file(path)]
        loaded += delivered_from_file(live)
        assert sorted(loaded) == sorted((topic, p, o) for p in (0, 1) for o in range(10)), loaded   # once each
        assert {(r["topic"], r["partition"], r["offset"]) for r in history(api)} == {(topic, 0, 4), (topic, 1, 7)}

        # set_offset on the Connect stream: applied between micro-batches on the server's workers
        changed = api.patch("/streams/sp/offsets", json={"offset": {f"{topic}:1": 8}, "timeout_ms": 240_000}).json()
        assert [(c["partition"], c["status"], c["offset"]) for c in changed] == [(1, "applied", 8)], changed
        wait_until(lambda: len(delivered_from_file(live)) == 11, WAIT_S, 0.5, "8..9 of partition 1 again")
        assert by_partition(delivered_from_file(live))[(topic, 1)] == [7, 8, 9, 8, 9]
        info = api.get("/streams/sp").json()
        assert info["status"] == "running" and info["spark"]["remote"] == spark_connect.url, info
        assert info["spark"]["query_id"] and info["spark"]["last_batch_id"] is not None, info
        assert api.put("/streams/sp/stop").status_code == 200
    finally:
        host.stop()


class SilentServer:
    """A TCP server that takes connections and never answers: a Spark Connect server that does not come up (a
    stream's session cannot start as long as it holds). `accepted`: the connections it holds."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                self.accepted.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self):
        self.sock.close()
        for conn in self.accepted:
            conn.close()


@pytest.mark.timeout(300)
def test_a_host_serves_while_its_spark_stream_s_session_starts(kafka, tmp_path):
    """A Spark stream's session and query start in the background: `PUT /start` answers at once and the stream
    is `starting` (saying what it waits for) while its Spark Connect server does not answer; a host restarted
    with it running serves at once, the stream `starting` again; a stop answers at once. No JVM: the session is a
    Spark Connect client's, and the server never answers it."""
    silent = SilentServer()
    host = HostProcess(tmp_path / "state").start()
    try:
        api = httpx.Client(base_url=host.wait_ready(), timeout=60)
        topic = kafka.new_topic(partitions=1)
        created = api.post("/streams", json={
            "name": "sp", "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers,
            "transform": "stream_registry.builtin_transformations.create_messages",
            "sink": f"cypherl://{tmp_path / 'out.cypherl'}", "engine": "spark",
            "spark.remote": f"sc://127.0.0.1:{silent.port}"})
        assert created.status_code == 201, created.text
        asked = time.monotonic()
        started = api.put("/streams/sp/start")
        assert started.status_code == 200, started.text
        assert time.monotonic() - asked < 30, "PUT /start waited for the Spark session"
        wait_until(lambda: silent.accepted, 60, 0.1, "the stream's session to reach the server")
        info = api.get("/streams/sp").json()
        assert info["status"] == "starting" and "Spark session" in (info["detail"] or ""), info
        assert api.get("/streams").status_code == 200

        host.stop()                                            # it does not wait for the session either
        held = len(silent.accepted)
        host = HostProcess(tmp_path / "state").start()         # serves within wait_ready's 30 s
        api = httpx.Client(base_url=host.wait_ready(), timeout=60)
        wait_until(lambda: len(silent.accepted) > held, 60, 0.1, "the restarted host's session to reach the server")
        info = api.get("/streams/sp").json()
        assert info["status"] == "starting" and "Spark session" in (info["detail"] or ""), info
        asked = time.monotonic()
        assert api.put("/streams/sp/stop").status_code == 200
        assert time.monotonic() - asked < 30, "PUT /stop waited for the Spark session"
        assert api.get("/streams/sp").json()["status"] == "stopped"
    finally:
        host.stop()
        silent.close()
