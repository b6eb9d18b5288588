"""A stream as a Structured Streaming query: the mgstreams_kafka streaming reader, an offset change applied
between micro-batches without restarting the query, the group's offsets committed after each micro-batch, and
exactly-once across a query restart and a driver kill (SIGKILL of the driver process, its JVM included).

On the session's classic SparkSession, on the Spark Connect server the suite shares, and in driver processes
of their own (the kill)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from mgclient_standin.mgclient import PYTHONPATH_ENTRY, journal_entries
from paths import ROOT, SUPPORT
from stream_helpers import by_partition, delivered_from_file, wait_until

from spark_bridge.job import Loading
from spark_bridge.micro_batch import StreamWriting
from spark_bridge.stream_control import ControlChannel
from spark_bridge.stream_query import StreamQuery, progress, start_stream_query
from stream_registry.graph.cypherl_frames import offsets_in_cypherl
from stream_registry.kafka.queries import PartitionQuery
from stream_registry.model import PartitionKey

pytestmark = pytest.mark.spark
TRANSFORM = "stream_helpers.offsets_transform"    # one statement per record: a duplicate shows
# the same, built in: the Connect server's Python workers import the product, not the tests' helpers
CREATE = "stream_registry.builtin_transformations.create_messages"


def source(kafka, topic: str, control: Path, **extra) -> dict[str, str]:
    return {"kafka.bootstrap.servers": kafka.bootstrap_servers, "subscribe": topic, "startingOffsets": "earliest",
            "controlDir": str(control), **{k: str(v) for k, v in extra.items()}}


def stored(path: Path, stream: str) -> dict[tuple[str, int], int]:
    return {tuple(tp): o for tp, o in offsets_in_cypherl(str(path), stream).items()} if path.exists() else {}


@pytest.mark.timeout(900)   # micro-batches of a loaded 2-core machine: minutes, not seconds
def test_a_change_moves_the_running_query_between_micro_batches_exactly_once(spark, kafka, tmp_path):
    topic = kafka.new_topic(2)
    kafka.produce(topic, 40, partitions=2)
    out, control, group = tmp_path / "out.cypherl", tmp_path / "control", f"g-{tmp_path.name}"
    sink = f"cypherl://{out}"
    query = StreamQuery(
        source(kafka, topic, control, maxOffsetsPerTrigger=8, resumeFrom="graph", sink=sink, sinkStream="s1",
               **{"kafka.group.id": group}),
        StreamWriting(Loading(TRANSFORM, (), sink, batch_size=3), "s1", exactly_once=True),
        str(tmp_path / "checkpoint"), f"s1_{tmp_path.name[-8:]}")
    running = start_stream_query(spark, query)
    try:
        t0, t1 = (topic, 0), (topic, 1)
        wait_until(lambda: stored(out, "s1") == {t0: 20, t1: 20}, 240, 0.2, "the first 40 records",
                   lambda: (stored(out, "s1"), progress(running)))
        assert len(running.recentProgress) >= 3, "maxOffsetsPerTrigger=8 cut 40 records into at least 5 batches"

        channel = ControlChannel(control)
        channel.request(1, {PartitionKey(topic, 0): 5})
        answer = channel.wait_applied(1, 120)
        assert answer.partitions == {PartitionKey(topic, 0): ("applied", 5, 20)}
        assert running.isActive, "the change restarted nothing"
        wait_until(lambda: stored(out, "s1") == {t0: 20, t1: 20} and len(by_partition(
            delivered_from_file(out))[t0]) == 35, 180, 0.2, "the records from the target",
            lambda: stored(out, "s1"))
        seen = by_partition(delivered_from_file(out))
        assert seen[t0] == [*range(20), *range(5, 20)], "after `applied`, t:0 goes on from the target only"
        assert seen[t1] == list(range(20))
        # the group follows the micro-batches: lag tools see the stream
        with PartitionQuery(kafka.bootstrap_servers, group) as ask:
            wait_until(lambda: ask.committed([PartitionKey(*t0), PartitionKey(*t1)]) ==
                       {PartitionKey(*t0): 20, PartitionKey(*t1): 20}, 60, 0.2, "the group's committed offsets")
        status = progress(running)
        assert status["query_id"] == str(running.id) and status["last_batch_id"] >= 5 and status["error"] is None
    finally:
        running.stop()

    # a query restart: a change made meanwhile and cancelled is never applied; nothing is written twice
    channel.request(2, {PartitionKey(topic, 1): 0})
    assert channel.cancel(2)
    kafka.produce(topic, 20, partitions=2)
    running = start_stream_query(spark, query)
    try:
        wait_until(lambda: stored(out, "s1") == {t0: 30, t1: 30}, 240, 0.2, "the records produced while stopped",
                   lambda: (stored(out, "s1"), progress(running)))
    finally:
        running.stop()
    seen = by_partition(delivered_from_file(out))
    assert seen[t0] == [*range(20), *range(5, 30)] and seen[t1] == list(range(30))
    assert channel.applied(2) is None


@pytest.mark.timeout(900)
def test_the_streaming_reader_runs_under_spark_connect(spark_connect, kafka, tmp_path):
    """The reader and its writing tasks run on the Connect server's Python workers; the change reaches them through
    the control directory. At least once (the checkpoint decides where a restart resumes)."""
    topic = kafka.new_topic(1)
    kafka.produce(topic, 12)
    out, control = tmp_path / "out.cypherl", tmp_path / "control"
    query = StreamQuery(source(kafka, topic, control, maxOffsetsPerTrigger=5),
                        StreamWriting(Loading(CREATE, (), f"cypherl://{out}", batch_size=5), "c1"),
                        str(tmp_path / "checkpoint"), f"c1_{tmp_path.name[-8:]}")
    running = start_stream_query(spark_connect, query)
    try:
        wait_until(lambda: len(delivered_from_file(out)) == 12, 240, 0.2, "12 records",
                   lambda: delivered_from_file(out))
        channel = ControlChannel(control)
        channel.request(1, {PartitionKey(topic, 0): 3})
        assert channel.wait_applied(1, 120).partitions == {PartitionKey(topic, 0): ("applied", 3, 12)}
        wait_until(lambda: len(delivered_from_file(out)) == 21, 120, 0.2, "the records from offset 3",
                   lambda: delivered_from_file(out))
        assert [o for _, _, o in delivered_from_file(out)] == [*range(12), *range(3, 12)]
    finally:
        running.stop()


# -- a driver killed: a process of its own, writing to Bolt through the pymgclient stand-in -------------------
def start_driver(spec: dict, journal: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([PYTHONPATH_ENTRY, str(SUPPORT), str(ROOT)]),
           "MGCLIENT_STANDIN_JOURNAL": str(journal), "MGCLIENT_STANDIN_SHARED": "1",
           "MGCLIENT_STANDIN_RECORD": "rows", "MGCLIENT_STANDIN_RTT_MS": "0", "PYSPARK_PYTHON": sys.executable}
    with open(log, "ab") as output:
        return subprocess.Popen([sys.executable, str(SUPPORT / "spark_stream_driver.py"), json.dumps(spec)],
                                stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def journal_records(journal: Path) -> list[tuple[str, int, int]]:
    """Every committed record statement of the stand-in's journal (a torn last line did not commit)."""
    out = []
    for entry in journal_entries(journal):
        for query, parameters in entry.get("statements", ()):
            if "offset" in parameters and "Msg" in query:
                out.append((parameters["topic"], parameters["partition"], parameters["offset"]))
    return out


def journal_offsets(journal: Path, stream: str) -> dict[tuple[str, int], int]:
    """The exactly-once offsets the stand-in's database holds for `stream`, committed in journal order."""
    out: dict[tuple[str, int], int] = {}
    for entry in journal_entries(journal):
        for name, topic, partition, offset in entry.get("offsets", ()):
            if name == stream:
                out[(topic, partition)] = offset
    return out


@pytest.mark.slow
@pytest.mark.timeout(1200)  # two driver starts (a JVM each: 90 s apiece on the loaded machine)
def test_exactly_once_on_bolt_across_a_driver_kill(kafka, tmp_path):
    topic = kafka.new_topic(2)
    kafka.produce(topic, 120, partitions=2)
    journal, log = tmp_path / "bolt.jsonl", tmp_path / "driver.log"
    sink = "bolt://memgraph-standin:7687"
    spec = {"source": source(kafka, topic, tmp_path / "control", maxOffsetsPerTrigger=16, resumeFrom="graph",
                             sink=sink, sinkStream="k1"),
            "transform": TRANSFORM, "sink": sink, "batch_size": 2, "stream": "k1", "exactly_once": True,
            "checkpoint": str(tmp_path / "checkpoint")}
    driver = start_driver(spec, journal, log)
    try:
        wait_until(lambda: len(journal_records(journal)) >= 16, 600, 0.1, "the driver's first micro-batches",
                   lambda: log.read_text()[-2000:])
        os.killpg(driver.pid, signal.SIGKILL)      # the driver and its JVM, mid-stream
        driver.wait(30)
        killed_at = len(journal_records(journal))
        assert killed_at < 120, "the kill came after the end: it proves nothing"
        driver = start_driver(spec, journal, log)
        wait_until(lambda: journal_offsets(journal, "k1") == {(topic, 0): 60, (topic, 1): 60}, 600, 0.2,
                   "the restarted driver's catching up",
                   lambda: (len(journal_records(journal)), log.read_text()[-2000:]))
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(30)
    counts = Counter(journal_records(journal))
    assert [k for k, n in counts.items() if n > 1] == [], "a record was written twice"
    assert sorted(counts) == sorted((topic, i % 2, i // 2) for i in range(120))


# -- the engine seam: a registered stream run by Spark, moved by set_offset ---------------------------------
@pytest.mark.timeout(900)
def test_a_registered_stream_runs_on_spark_and_set_offset_moves_it(spark, kafka, tmp_path):
    from spark_bridge.spark_runner import spark_engine
    from stream_registry import ChangeStatus, StreamConfig, StreamRegistry, StreamStatus

    topic = kafka.new_topic(1)
    kafka.produce(topic, 12)
    out = tmp_path / "out.cypherl"
    registry = StreamRegistry(tmp_path / "state", engines={"spark": spark_engine(spark, tmp_path / "spark")},
                              engine_of=lambda config: "spark")
    try:
        registry.create(StreamConfig("sp1", [topic], kafka.bootstrap_servers, TRANSFORM, f"cypherl://{out}",
                                     consumer_group=f"g_sp1_{topic}", batch_size=4))
        registry.start("sp1")
        wait_until(lambda: len(delivered_from_file(out)) == 12, 300, 0.2, "the first 12 records",
                   lambda: (registry.get("sp1"), delivered_from_file(out)))
        wait_until(lambda: registry.get("sp1").status == StreamStatus.RUNNING, 60, what="the engine's status")
        changes = registry.set_offset("sp1", 4, timeout=300)
        assert [(c.status, c.offset) for c in changes] == [(ChangeStatus.APPLIED, 4)], changes
        wait_until(lambda: len(delivered_from_file(out)) == 20, 300, 0.2, "the records from offset 4")
        assert [o for _, _, o in delivered_from_file(out)] == [*range(12), *range(4, 12)]
        assert [(h.status, h.offset) for h in registry.history("sp1")][-1:] == [(ChangeStatus.APPLIED, 4)]
        assert registry.stop("sp1").status == StreamStatus.STOPPED
    finally:
        registry.close()
