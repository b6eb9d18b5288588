"""Spark Connect for real: the mgstreams_kafka source and the backfill on a Spark Connect server, compared
record for record with the same work on the classic session; the CLI's --remote, sc:// and local[N]."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
from broker_support import PRODUCER_CONFIG
from click.testing import CliRunner
from configs import MERGE
from paths import ROOT
from test_spark_backfill import cypherl_keys

from mgstreams.cli.backfill import backfill as backfill_command
from mgstreams.cli.backfill import root_cause
from spark_bridge.backfill import BackfillJob, Loading, load_frame, run_backfill
from spark_bridge.kafka_source import register
from spark_bridge.spark_session import is_connect
from stream_registry.offset_spec import parse_offset_spec

pytestmark = pytest.mark.spark



def records(rows) -> list[tuple]:
    """Every field of every row, headers included, in (partition, offset) order."""
    out = []
    for r in rows:
        stamp = round(r.timestamp.timestamp() * 1000) if r.timestamp else None
        headers = [(h.key, bytes(h.value) if h.value is not None else None) for h in (r.headers or [])]
        out.append((r.topic, r.partition, r.offset, bytes(r.key) if r.key is not None else None,
                    bytes(r.value), stamp, r.timestampType, headers))
    return sorted(out, key=lambda t: (t[1], t[2]))


def produce_with_headers(kafka, topic: str, count: int, partitions: int) -> None:
    from confluent_kafka import Producer

    # PRODUCER_CONFIG: one record per batch on Tansu, whose high watermark is wrong after a multi-record batch
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 5, **PRODUCER_CONFIG})
    for i in range(count):
        producer.produce(topic, value=b'{"i": %d}' % i, key=None if i % 5 == 0 else b"k%d" % i, partition=i % partitions,
                         timestamp=1_700_000_000_000 + i, headers=[("n", b"%d" % i), ("empty", None)] if i % 2 else None)
    assert producer.flush(30) == 0


def test_source_under_connect_equals_the_classic_read(spark, spark_connect, kafka):
    assert is_connect(spark_connect) and not is_connect(spark)
    topic = kafka.new_topic(3)
    produce_with_headers(kafka, topic, 150, 3)
    results = {}
    for name, session in (("classic", spark), ("connect", spark_connect)):
        register(session)
        frame = (session.read.format("mgstreams_kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
                 .option("subscribe", topic).option("minPartitions", "5").option("includeHeaders", "true")
                 .option("startingOffsets", f'{{"{topic}": {{"0": 7, "1": -2, "2": -2}}}}').load()
                 .where("offset < 45"))
        results[name] = (frame.schema.simpleString(), records(frame.collect()))
    assert results["connect"] == results["classic"]
    schema, rows = results["connect"]
    assert schema.endswith("headers:array<struct<key:string,value:binary>>>")
    assert Counter(r[1] for r in rows) == {0: 38, 1: 45, 2: 45}
    assert rows[0][7] == [("n", b"21"), ("empty", None)]   # partition 0 from offset 7 = message 21


def test_bad_options_under_connect_fail_naming_the_option(spark_connect, kafka):
    register(spark_connect)
    with pytest.raises(Exception) as caught:
        (spark_connect.read.format("mgstreams_kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
         .option("subscribe", "t").option("minPartitions", "zero").load().collect())
    assert "minPartitions: expected a positive integer, got 'zero'" in root_cause(caught.value)


def test_backfill_under_connect_writes_what_the_classic_run_writes(spark, spark_connect, kafka, tmp_path):
    topic = kafka.new_topic(3)
    produce_with_headers(kafka, topic, 120, 3)
    outputs, reports, progress = {}, {}, []
    for name, session in (("classic", spark), ("connect", spark_connect)):
        out = tmp_path / name
        job = BackfillJob(kafka.bootstrap_servers, (topic,), parse_offset_spec(3), parse_offset_spec("latest"),
                          MERGE, f"cypherl://{out}", batch_size=7, min_partitions=5)
        calls = []
        reports[name] = run_backfill(session, job, on_progress=lambda done, total, calls=calls: calls.append((done, total)))
        progress.append(calls)
        outputs[name] = {p.name: p.read_bytes() for p in out.iterdir()}
    assert outputs["connect"] == outputs["classic"]                    # the same files, byte for byte
    assert len(outputs["connect"]) == 5
    assert cypherl_keys(tmp_path / "connect") == Counter({(topic, p, o): 1 for p in range(3) for o in range(3, 40)})
    strip = [(s.range, s.records, s.statements, s.batches) for s in reports["classic"].partitions]
    assert [(s.range, s.records, s.statements, s.batches) for s in reports["connect"].partitions] == strip
    # load_frame (any DataFrame with the Kafka row schema) on the source, under both
    frames = {}
    for name, session in (("classic", spark), ("connect", spark_connect)):
        register(session)
        frame = (session.read.format("mgstreams_kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
                 .option("subscribe", topic).load().where("offset >= 30"))
        rows = load_frame(frame, Loading(MERGE, (), f"cypherl://{tmp_path / ('frame-' + name)}", batch_size=4)).collect()
        frames[name] = (sorted((r.partition, r.from_offset, r.until_offset, r.records) for r in rows),
                        {p.name: p.read_bytes() for p in (tmp_path / f"frame-{name}").iterdir()})
    assert frames["connect"] == frames["classic"]
    assert frames["connect"][0] == [(p, 30, 40, 10) for p in range(3)]
    classic_calls, connect_calls = progress
    assert classic_calls[-1] == connect_calls[-1] == (5, 5)
    assert all(0 <= done <= 5 for done, _ in connect_calls)
    assert len(connect_calls) >= 2, connect_calls   # the client's progress handler reported, then the end


def test_cli_remote_sc_runs_on_the_connect_server_and_leaves_the_classic_session_alone(spark, spark_connect,
                                                                                          kafka, tmp_path):
    topic = kafka.new_topic(2)
    kafka.produce(topic, 40, partitions=2)
    args = ["--topics", topic, "--bootstrap-servers", kafka.bootstrap_servers, "--from", "earliest",
            "--transform", MERGE, "--batch-size", "6", "--engine", "spark"]
    runs = {}
    for name, extra in (("classic", []), ("connect", ["--remote", spark_connect.url])):
        report = tmp_path / f"{name}.json"
        result = CliRunner().invoke(backfill_command, [*args, *extra, "--sink", f"cypherl://{tmp_path / name}",
                                                      "--report", str(report)])
        assert result.exit_code == 0, result.output
        runs[name] = json.loads(report.read_text())
        assert "engine: spark (asked for (--engine spark" in result.stderr
    assert runs["connect"]["spark"]["remote"] == spark_connect.url
    assert [p["records"] for p in runs["connect"]["partitions"]] == [p["records"] for p in runs["classic"]["partitions"]]
    assert {p.name: p.read_text() for p in (tmp_path / "connect").iterdir()} == \
        {p.name: p.read_text() for p in (tmp_path / "classic").iterdir()}
    assert spark.sparkContext._jsc is not None and not os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    assert spark_connect.range(3).count() == 3   # the fixture's own Connect session is still usable
    # a failure inside the server's Python worker comes back as the CLI's one-line error
    numbers = kafka.new_topic(1)
    kafka.produce(numbers, 3, payload=lambda i: b"42")
    failed = CliRunner().invoke(backfill_command, [
        "--topics", numbers, "--bootstrap-servers", kafka.bootstrap_servers, "--from", "earliest", "--engine", "spark",
        "--transform", "stream_registry.builtin_transformations.json_nodes", "--sink", "null://",
        "--remote", spark_connect.url])
    assert failed.exit_code == 1
    error = failed.stderr.rstrip("\n").splitlines()[-1]       # after the plan and engine lines
    assert error.startswith("mgstreams: error: transform 'stream_registry.builtin_transformations.json_nodes'")
    assert f"payload at {numbers}:0 offset 0 is a JSON int, expected an object (TransformError)" in error


def test_cli_remote_local_starts_a_connect_server_in_its_own_process(kafka, tmp_path):
    """`--remote local[1]` in a fresh process (a process holds one Spark driver: this one has the classic
    session): the same files as the local engine writes for the same plan."""
    topic = kafka.new_topic(2)
    kafka.produce(topic, 30, partitions=2)
    common = ["--topics", topic, "--bootstrap-servers", kafka.bootstrap_servers, "--from", "earliest",
              "--transform", MERGE, "--batch-size", "4"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_CONNECT", "SPARK_REMOTE", "PYSPARK_GATEWAY"))}
    done = subprocess.run([sys.executable, "-m", "mgstreams", "backfill", *common, "--engine", "spark",
                           "--remote", "local[1]", "--sink", f"cypherl://{tmp_path / 'connect'}",
                           "--report", str(tmp_path / "connect.json")],
                          capture_output=True, text=True, timeout=240, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "connect.json").read_text())
    assert report["spark"]["remote"] == "local[1]" and report["records"] == 30
    local = CliRunner().invoke(backfill_command, [*common, "--engine", "local", "--sink",
                                                  f"cypherl://{tmp_path / 'local'}"])
    assert local.exit_code == 0, local.output
    assert {p.name: p.read_text() for p in (tmp_path / "connect").iterdir()} == \
        {p.name: p.read_text() for p in (tmp_path / "local").iterdir()}
    assert len(list((tmp_path / "local").iterdir())) == 2
