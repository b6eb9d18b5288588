"""Backfill on the shared SparkSession: files per range, the hand-off, retries, the CLI."""
from __future__ import annotations

import json
import re
import textwrap
import uuid
from collections import Counter
from pathlib import Path

import pytest
from broker_support import QUICK_FIRST_JOIN
from click.testing import CliRunner
from configs import MERGE
from confluent_kafka import Consumer, KafkaError, TopicPartition

from mgstreams.cli.backfill import backfill as backfill_command
from spark_bridge.backfill import BackfillJob, Loading, load_frame, plan_job, run_backfill
from spark_bridge.kafka_source import register
from stream_registry.graph.transform import load_transformation
from stream_registry.offset_spec import parse_offset_spec

pytestmark = pytest.mark.spark

_KEY = re.compile(r'\{topic: "([^"]+)", partition: (\d+), offset: (\d+)\}')


def keys_in(text: str) -> list[tuple[str, int, int]]:
    return [(t, int(p), int(o)) for t, p, o in _KEY.findall(text)]


def cypherl_keys(directory: Path) -> Counter:
    return Counter(k for f in directory.glob("*.cypherl") for k in keys_in(f.read_text()))


def job(kafka, topic, sink, start="earliest", until="latest", **kwargs) -> BackfillJob:
    return BackfillJob(kafka.bootstrap_servers, (topic,), parse_offset_spec(start), parse_offset_spec(until),
                       kwargs.pop("transform", MERGE), sink, **kwargs)


def test_backfill_writes_one_cypherl_file_per_range(spark, kafka, tmp_path):
    topic = kafka.new_topic(3)
    kafka.produce(topic, 90, partitions=3)
    out = tmp_path / "out"
    report = run_backfill(spark, job(kafka, topic, f"cypherl://{out}", start=5, batch_size=7, min_partitions=4))
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(f"{p.range.name}.cypherl" for p in report.partitions)
    assert [p.range for p in report.partitions] == list(report.plan.ranges) and len(names) == 4
    assert cypherl_keys(out) == Counter({(topic, p, o): 1 for p in range(3) for o in range(5, 30)})
    assert (report.records, report.statements) == (75, 75)
    biggest = max(report.partitions, key=lambda p: p.records)
    assert biggest.batches == -(-biggest.records // 7) and biggest.attempt == 0
    # a rerun of the same plan replaces the files instead of adding to them
    run_backfill(spark, job(kafka, topic, f"cypherl://{out}", start=5, batch_size=7, min_partitions=4),
                 report.plan)
    assert sorted(p.name for p in out.iterdir()) == names
    assert set(cypherl_keys(out).values()) == {1}


def test_hand_off_backfill_until_committed_then_live_stream_covers_every_offset_once(spark, kafka, tmp_path):
    topic, group = kafka.new_topic(2), f"live-{uuid.uuid4().hex[:8]}"
    kafka.produce(topic, 60, partitions=2)
    live = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": group,   # QUICK_FIRST_JOIN: Tansu
                     "enable.auto.commit": False, "enable.partition.eof": True, **QUICK_FIRST_JOIN})
    # the live stream ran for a while and stopped: it committed 12 and 19
    live.commit(offsets=[TopicPartition(topic, 0, 12), TopicPartition(topic, 1, 19)], asynchronous=False)
    out = tmp_path / "backfill"
    backfill = job(kafka, topic, f"cypherl://{out}", until="committed", client_config={"group.id": group})
    range_plan = plan_job(backfill)
    kafka.produce(topic, 20, partitions=2)  # traffic keeps arriving; the plan is fixed
    report = run_backfill(spark, backfill, range_plan)
    assert [(p.partition, p.from_offset, p.until_offset) for p in report.partitions] == [(0, 0, 12), (1, 0, 19)]
    # the live stream resumes from its committed offsets
    live.subscribe([topic])
    seen, at_end = [], set()
    while len(at_end) < 2:
        msg = live.poll(15)
        assert msg is not None, "live consumer timed out"
        if msg.error():
            assert msg.error().code() == KafkaError._PARTITION_EOF
            at_end.add(msg.partition())
        else:
            seen.append((topic, msg.partition(), msg.offset()))
    live.close()
    covered = cypherl_keys(out) + Counter(seen)
    assert covered == Counter({(topic, p, o): 1 for p in range(2) for o in range(40)})


def retry_module(directory: Path, fail_marker: Path, journal_scheme: str) -> str:
    """A MERGE transformation that fails once at offset 10 (after two batches of 5 were written),
    and a `journal://` sink that appends every batch like a graph committing one transaction per batch."""
    (directory / "retry_transform.py").write_text(textwrap.dedent(f"""
        import os
        from stream_registry.graph import sinks
        from stream_registry.builtin_transformations import merge_messages
        from stream_registry.graph.cypher_literals import render_statement

        class JournalSink:
            def __init__(self, path):
                self.path = path
            def write(self, statements):
                lines = "".join(render_statement(s.query, s.parameters) + "\\n" for s in statements)
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
                try:
                    os.write(fd, lines.encode())
                finally:
                    os.close(fd)
            def close(self):
                pass

        sinks.SCHEMES.setdefault({journal_scheme!r}, sinks.Scheme(
            parse=lambda parts, query, uri: parts.path, open=lambda path, credentials: JournalSink(path)))

        def merge_or_fail_once(messages):
            first = messages.message_at(0)
            if first.partition() == 0 and first.offset() >= 10 and os.path.exists({str(fail_marker)!r}):
                os.unlink({str(fail_marker)!r})
                raise RuntimeError("injected failure after two committed batches")
            return merge_messages(messages)
    """))
    load_transformation("retry_transform.merge_or_fail_once", [str(directory)])  # registers the scheme here too
    return "retry_transform.merge_or_fail_once"


def max_task_failures(spark) -> int:
    master = spark.sparkContext.master
    found = re.fullmatch(r"local\[(\d+|\*),\s*(\d+)\]", master)
    if found:
        return int(found.group(2))
    return 1 if master.startswith("local") else int(spark.conf.get("spark.task.maxFailures", "4"))


def test_forced_task_retry_with_an_idempotent_transformation_writes_no_duplicates(spark, kafka, tmp_path):
    if max_task_failures(spark) < 2:
        pytest.skip(f"master {spark.sparkContext.master} never retries a task (local[N] allows one attempt); "
                    "the shared session needs a master such as local[2,2]")
    topic, marker, journal = kafka.new_topic(2), tmp_path / "fail-once", tmp_path / "graph.journal"
    kafka.produce(topic, 60, partitions=2)
    marker.touch()
    transform = retry_module(tmp_path, marker, "journal")
    report = run_backfill(spark, job(kafka, topic, f"journal://{journal}", transform=transform,
                                     search_dirs=(str(tmp_path),), batch_size=5))
    assert {p.partition: p.attempt for p in report.partitions} == {0: 1, 1: 0}
    writes = Counter(keys_in(journal.read_text()))
    assert {k for k, n in writes.items() if n > 1} == {(topic, 0, o) for o in range(10)}  # replayed batches
    assert set(writes) == {(topic, p, o) for p in range(2) for o in range(30)}  # MERGE: one node each


def test_rerun_after_a_failed_job_is_idempotent_and_leaves_no_partial_files(spark, kafka, tmp_path):
    topic, marker, journal = kafka.new_topic(2), tmp_path / "fail-once", tmp_path / "graph.journal"
    kafka.produce(topic, 40, partitions=2)
    transform = retry_module(tmp_path, marker, "journal")
    backfill = job(kafka, topic, f"journal://{journal}", transform=transform, search_dirs=(str(tmp_path),),
                   batch_size=5)
    marker.touch()
    if max_task_failures(spark) < 2:
        with pytest.raises(Exception, match="injected failure"):
            run_backfill(spark, backfill)
    else:
        run_backfill(spark, backfill)  # the task retry does the rerun
    run_backfill(spark, backfill)
    writes = Counter(keys_in(journal.read_text()))
    assert set(writes) == {(topic, p, o) for p in range(2) for o in range(20)}
    assert writes[(topic, 0, 0)] >= 2  # written by the failed attempt and again by the rerun
    # cypherl: a failed task removes its temporary file; the rerun's files hold each record once
    out = tmp_path / "files"
    marker.touch()
    files_job = job(kafka, topic, f"cypherl://{out}", transform=transform, search_dirs=(str(tmp_path),),
                    batch_size=5)
    if max_task_failures(spark) < 2:
        with pytest.raises(Exception, match="injected failure"):
            run_backfill(spark, files_job)
        assert [p.name for p in out.iterdir() if p.name.startswith(f".{topic}-0-")] == []
        run_backfill(spark, files_job)
    else:
        run_backfill(spark, files_job)
    assert cypherl_keys(out) == Counter({(topic, p, o): 1 for p in range(2) for o in range(20)})


def test_load_frame_loads_a_source_dataframe(spark, kafka, tmp_path):
    topic = kafka.new_topic(2)
    kafka.produce(topic, 30, partitions=2)
    register(spark)
    frame = (spark.read.format("mgstreams_kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
             .option("subscribe", topic).load().where("offset >= 3"))
    out = tmp_path / "frame"
    rows = load_frame(frame, Loading(MERGE, (), f"cypherl://{out}", batch_size=4)).collect()
    assert sorted((r.partition, r.from_offset, r.until_offset, r.records) for r in rows) == \
        [(0, 3, 15, 12), (1, 3, 15, 12)]
    assert cypherl_keys(out) == Counter({(topic, p, o): 1 for p in range(2) for o in range(3, 15)})


# -- the CLI ------------------------------------------------------------------------------
def test_cli_backfill_prints_a_report_and_writes_json(spark, kafka, tmp_path):
    topic = kafka.new_topic(2)
    kafka.produce(topic, 50, partitions=2)
    report_file = tmp_path / "report.json"
    result = CliRunner().invoke(backfill_command, [
        "--topics", topic, "--bootstrap-servers", kafka.bootstrap_servers, "--from", "earliest",
        "--until", f'{{"{topic}:0": 20}}', "--transform", MERGE, "--sink", f"cypherl://{tmp_path / 'cli'}",
        "--min-partitions", "3", "--batch-size", "10", "--report", str(report_file), "--engine", "spark"])
    assert result.exit_code == 0, result.output
    assert re.search(r"^total\s+45\s+45\s", result.stdout, re.M)
    data = json.loads(report_file.read_text())
    assert (data["records"], data["statements"], data["job"]["until"]) == (45, 45, {f"{topic}:0": "20"})
    assert sorted((p["partition"], p["from_offset"], p["until_offset"]) for p in data["partitions"]) == \
        [(0, 0, 20), (1, 0, 12), (1, 12, 25)]
    assert data["engine"]["engine"] == "spark" and data["engine"]["requested"] == "spark"
    assert spark.sparkContext._jsc is not None  # the shared session was reused, not stopped


def test_cli_backfill_for_a_registered_stream_dry_run(kafka, tmp_path):
    from stream_registry import StreamConfig, StreamRegistry

    topic = kafka.new_topic(2)
    kafka.produce(topic, 10, partitions=2)
    registry = StreamRegistry(tmp_path / "state")  # the host holds the state dir; the backfill only reads it
    try:
        registry.create(StreamConfig("orders", [topic], kafka.bootstrap_servers, MERGE,
                                     f"cypherl://{tmp_path / 'live.cypherl'}"))
        result = CliRunner().invoke(backfill_command, [
            "--stream", "orders", "--state-dir", str(tmp_path / "state"), "--from", "2", "--until", "latest",
            "--sink", f"cypherl://{tmp_path / 'out'}", "--dry-run"])
    finally:
        registry.close()
    assert result.exit_code == 0, result.output
    assert re.search(rf"^{topic}\s+0\s+2\s+5\s+3\s*$", result.stdout, re.M)
    assert "plan: 2 range(s), 6 offset(s)" in result.stderr


@pytest.mark.parametrize("args, message", [
    (["--topics", "t", "--bootstrap-servers", "h:1", "--from", "soon", "--transform", MERGE, "--sink", "null://"],
     "offset: cannot parse 'soon'"),
    (["--topics", "t", "--bootstrap-servers", "h:1", "--from", "earliest", "--sink", "null://"],
     "--transform: required with --topics"),
    (["--topics", "t", "--bootstrap-servers", "h:1", "--from", "earliest", "--transform", MERGE, "--sink", "file:x"],
     "sink: expected a URI"),
    (["--topics", "t", "--bootstrap-servers", "h:1", "--from", "earliest", "--transform", "nope.fn",
      "--sink", "null://"], "transform 'nope.fn'"),
    (["--from", "earliest", "--sink", "null://"], "--topics: give --stream NAME, or --topics with"),
])
def test_cli_errors_are_one_line_and_start_no_spark(args, message):
    result = CliRunner().invoke(backfill_command, args)
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("mgstreams: error: ") and message in result.stderr
    assert result.stderr.count("\n") == 1
