"""Issues 6 and 9: the demo's path, end to end, as `make demo` runs it (minus the printing).

`run_demo` is the very function `python -m mgstreams.demo` calls: it starts a
stream host in a child process, produces the transfer stream, drives the stream
through the query module's procedures (the file itself, an HTTP client of the
host): races set_stream_offset against the group's first rebalance (the
cluster's default 3 s initial delay stays on), rewinds while running; runs
`mgstreams describe` / `history` against the host; backfills with the shared
SparkSession and compares; stops the host with SIGTERM. Every check must pass.
The check functions are also fed wrong data here, so a broken run cannot pass them.
"""
from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime

import pytest
from broker_support import PRODUCER_CONFIG, QUICK_FIRST_JOIN
from mgclient_standin.mgclient import Server

from mgstreams.demo import Check, DemoSettings, run_demo
from mgstreams.demo.checks import (
    check_backfill_matches_live,
    check_first_delivered,
    check_history,
    check_offsets,
    check_rewind,
)
from mgstreams.demo.records import read_cypherl
from mgstreams.demo.results import Produced, Record, RewindResult
from mgstreams.query_module import QueryModule
from mgstreams.samples import generate_transfers
from spark_bridge.spark_session import ensure_worker_python
from stream_registry import ChangeStatus, OffsetChange, PartitionOffsets, StreamError
from stream_registry.registry.registry import stored_config

ensure_worker_python()  # before the shared session starts: workers must run this venv's Python

CHECKS = ["produce", "rebalance race", "first delivered", "rewind while running", "offsets and lag", "history",
          "backfill range", "backfill equals live", "host shutdown"]


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(120)
def test_demo_path_passes_every_check(kafka, spark, tmp_path):
    topic = kafka.new_topic(partitions=6, prefix="transfers")
    # On Tansu, QUICK_FIRST_JOIN and PRODUCER_CONFIG are workarounds (see broker_support): the first join waits
    # half the session (23 s at the default, past the race's 15 s) and multi-record batches give wrong watermarks.
    settings = DemoSettings(out=tmp_path / "demo-out", topic=topic, stream=f"transfers_{uuid.uuid4().hex[:8]}",
                            consumer_configs=QUICK_FIRST_JOIN, producer_configs=PRODUCER_CONFIG)

    result = run_demo(settings, kafka.bootstrap_servers, lambda: spark)

    assert [c.name for c in result.checks] == CHECKS, result.checks
    failed = [f"{c.name}: {c.reason}" for c in result.checks if c.ok is not True]
    assert not failed, failed
    assert result.ok
    assert result.host_url.startswith("http://127.0.0.1:") and result.host_exit == 0

    # The race was real: the call found nothing assigned and waited for the group.
    race = result.race
    assert race.status_before.value == "starting" and race.assigned_before == 0
    if kafka.embedded is not None:   # 3 s initial rebalance delay (a real cluster may be configured with 0)
        assert race.seconds > 0.5, f"set_offset returned after {race.seconds:.2f} s: no rebalance was awaited"
    assert {(c.status, c.offset) for c in race.changes} == {(ChangeStatus.APPLIED, settings.live_from)}

    # What the demo tells users to load is there, and the backfill files hold what the report says.
    produced = result.produced
    live = read_cypherl([settings.live_path])
    assert len(live) == sum(end - settings.live_from for end in produced.log_end.values()) + \
        settings.rewind_by * len(settings.rewind_partitions)
    assert settings.schema_path.read_text() == "CREATE INDEX ON :Account(id);\n"
    assert len(result.backfill.files) == len(result.backfill.plan.ranges) == 6
    assert settings.report_path.exists()
    # The host ran the stream, not this process: its state and log are in the output directory.
    assert stored_config(settings.state_dir, settings.stream).transform == "transfers.transfer"
    assert settings.host_log.exists()
    assert result.backfill.report.records == sum(end - settings.backfill_from for end in produced.log_end.values())


def test_transfers_are_deterministic_and_plausible():
    first, again = generate_transfers(7, 500, 50), generate_transfers(7, 500, 50)
    assert first == again and first != generate_transfers(8, 500, 50)
    assert all(t.source != t.target and t.amount >= 1.0 for t in first)
    assert all(a.ts < b.ts for a, b in zip(first, first[1:], strict=False))
    assert len({t.transfer_id for t in first}) == 500
    assert {t.currency for t in first} <= {"EUR", "USD", "GBP", "CHF"}


# -- the checks fail on wrong data -------------------------------------------------------------
def _produced(log_end):
    moment = datetime(2026, 11, 1, tzinfo=UTC)
    return Produced("t", sum(log_end.values()), 10, dict(log_end), dict(log_end), moment, moment, {"EUR": 1})


def _records(partition, offsets, amount=1.0):
    return [Record("t", partition, o, f"MERGE ... SET t.amount = {amount}, t.kafka_topic = \"t\", "
                                      f"t.kafka_partition = {partition}, t.kafka_offset = {o};") for o in offsets]


def test_first_delivered_fails_when_a_partition_starts_elsewhere_or_skips():
    produced = _produced({0: 10, 1: 10})
    assert check_first_delivered(_records(0, range(5, 10)) + _records(1, range(5, 10)), produced, 5).ok
    early = check_first_delivered(_records(0, range(4, 10)) + _records(1, range(5, 10)), produced, 5)
    assert not early.ok and "partition 0: first offset 4, expected 5" in early.reason
    gap = check_first_delivered(_records(0, [5, 6, 8, 9]) + _records(1, range(5, 10)), produced, 5)
    assert not gap.ok and "partition 0" in gap.reason
    missing = check_first_delivered(_records(0, range(5, 10)), produced, 5)
    assert not missing.ok and "partition 1: first offset None" in missing.reason


def test_rewind_fails_when_other_partitions_move_or_redelivery_starts_late():
    produced = _produced({0: 10, 1: 10})
    settings = DemoSettings(out="unused", topic="t", rewind_by=4, rewind_partitions=(0,))
    rewind = RewindResult({"t:0": "-4"}, (OffsetChange(topic="t", partition=0, previous_offset=10, offset=6,
                                                       status=ChangeStatus.APPLIED),), 2, 0.01)
    before = _records(1, [8, 9])
    assert check_rewind(rewind, before + _records(0, range(6, 10)), produced, settings).ok
    assert not check_rewind(rewind, before + _records(0, range(7, 10)), produced, settings).ok
    assert not check_rewind(rewind, before + _records(0, range(6, 10)) + _records(1, [9]), produced, settings).ok
    pending = RewindResult(rewind.spec, (OffsetChange(topic="t", partition=0, previous_offset=10, offset=6,
                                                      status=ChangeStatus.PENDING, message="not assigned"),), 2, 15)
    assert not check_rewind(pending, before + _records(0, range(6, 10)), produced, settings).ok


def test_backfill_comparison_fails_on_one_changed_statement():
    live = _records(0, range(5, 10)) + _records(0, range(8, 10))       # with a redelivery
    backfill = _records(0, range(0, 10))
    assert check_backfill_matches_live(live, backfill) == Check(
        "backfill equals live", True, "5 overlapping statements identical (0:[5,10))")
    changed = backfill[:7] + _records(0, [7], amount=2.0) + backfill[8:]
    result = check_backfill_matches_live(live, changed)
    assert not result.ok and "1 of 5 overlapping statements differ, first at t:0@7" in result.reason
    assert not check_backfill_matches_live(live, _records(1, range(5, 10))).ok          # no overlap
    assert not check_backfill_matches_live(live + _records(0, [9], amount=3.0), backfill).ok


def test_offsets_check_fails_with_lag_or_unassigned_partitions():
    produced = _produced({0: 10})
    assert check_offsets([PartitionOffsets(topic="t", partition=0, committed_offset=10, position=10,
                                           log_start_offset=0, log_end_offset=10, lag=0, assigned=True)], produced).ok
    assert not check_offsets([PartitionOffsets(topic="t", partition=0, committed_offset=8, position=8,
                                               log_start_offset=0, log_end_offset=10, lag=2, assigned=True)],
                                               produced).ok
    assert not check_offsets([PartitionOffsets(topic="t", partition=0, committed_offset=10, position=None,
                                               log_start_offset=0, log_end_offset=10, lag=0, assigned=False)],
                                               produced).ok


def test_history_check_fails_on_a_missing_or_extra_entry_or_wrong_order():
    changes = [OffsetChange(topic="t", partition=0, previous_offset=None, offset=5, status=ChangeStatus.APPLIED),
               OffsetChange(topic="t", partition=0, previous_offset=9, offset=7, status=ChangeStatus.APPLIED),
               OffsetChange(topic="t", partition=1, previous_offset=None, offset=5, status=ChangeStatus.PENDING,
                            message="not assigned")]
    newer, older = datetime(2026, 11, 1, 9, tzinfo=UTC), datetime(2026, 11, 1, 8, tzinfo=UTC)
    entries = [{"changed_at": newer, "topic": "t", "partition": 0, "previous_offset": 9, "offset": 7},
               {"changed_at": older, "topic": "t", "partition": 0, "previous_offset": None, "offset": 5}]
    assert check_history(entries, changes).ok
    assert not check_history(entries[:1], changes).ok
    assert not check_history(entries + [{**entries[0], "partition": 1}], changes).ok
    assert not check_history(entries[::-1], changes).ok


MODULE = '''
import os
import mgp

def _named(name):
    def rename(fn):
        fn.__name__ = name
        return fn
    return rename

@mgp.read_proc
def echo(name: str, configs: mgp.Map = {}, secret: mgp.Map = {}) -> mgp.Record(name=str, url=str):
    if name == "bad":
        raise Exception("name: 'bad' is not allowed\\n  second line")
    return mgp.Record(name=name, url=os.environ["MGSTREAMS_URL"])

@mgp.read_proc
@_named("list")
def list_all() -> mgp.Record(n=int):
    return [mgp.Record(n=1), mgp.Record(n=2)]

def helper() -> int:
    return 3
'''


def test_query_module_calls_procedures_by_their_cypher_names_and_prints_the_call(tmp_path, monkeypatch):
    import mgp

    path = tmp_path / "streams.py"
    path.write_text(MODULE)
    monkeypatch.delenv("MGSTREAMS_URL", raising=False)
    backend_before = dict(vars(mgp._mgp))
    shown = []
    with QueryModule(path, "http://127.0.0.1:9", on_call=shown.append) as streams:
        assert sorted(streams.procedures) == ["echo", "list"]          # what the file registers, not `helper`
        assert streams.call("echo", "x", {"a:b": 1}, {"password": "hunter2"}, secret_args=(2,)) == [
            {"name": "x", "url": "http://127.0.0.1:9"}]
        assert streams.call("list", quiet=True) == [{"n": 1}, {"n": 2}]
        with pytest.raises(StreamError, match=r'^CALL streams.echo\("bad"\): name: .bad. is not allowed second line$'):
            streams.call("echo", "bad")
        with pytest.raises(StreamError, match="registers no procedure 'drop'"):
            streams.call("drop", "x")
    assert shown == ['CALL streams.echo("x", {`a:b`: 1}, {password: "***"})', 'CALL streams.echo("bad")',
                     'CALL streams.drop("x")']
    assert "MGSTREAMS_URL" not in os.environ and dict(vars(mgp._mgp)) == backend_before


def test_read_cypherl_rejects_lines_it_cannot_place(tmp_path):
    path = tmp_path / "x.cypherl"
    path.write_text('MERGE (a:Account {id: "1"}) SET t.kafka_topic = "t", t.kafka_partition = 2, t.kafka_offset = 7;\n'
                    "CREATE (n);\n")
    with pytest.raises(Exception, match="x.cypherl:2: not a transfer statement"):
        read_cypherl([path])


def test_bolt_mode_reads_the_graph_back_as_the_transformation_writes_it(monkeypatch, tmp_path):
    """With MEMGRAPH_URI the live records come from Memgraph: the rendering must match the cypherl sink's."""
    from mgstreams.demo.graph import read_graph
    from stream_registry.graph import sinks
    from stream_registry.graph.transform import Message, load_transformation, run_transformation
    from stream_registry.registry.runners.runner import query_module_dirs

    transfer = generate_transfers(3, 1, 5)[0]
    message = Message("transfers", 4, 1234, transfer.source.encode(), transfer.payload(), 0)
    fn = load_transformation("transfers.transfer", query_module_dirs())
    (statement,) = run_transformation(fn, [message])
    sink_path = tmp_path / "one.cypherl"
    with sinks.open_sink(f"cypherl://{sink_path}") as sink:
        sink.write([statement])
    p = statement.parameters
    row = (p["transfer_id"], p["from_account"], p["to_account"], p["amount"], p["currency"], p["ts"],
           p["kafka_topic"], p["kafka_partition"], p["kafka_offset"])
    memgraph = Server(rtt_ms=0)
    memgraph.answer(lambda query, parameters: "[t:TRANSFER]" in query and "RETURN" in query, [row])
    monkeypatch.setattr(sinks.bolt, "connect_driver", memgraph.connect)
    settings = DemoSettings(out=tmp_path, topic="transfers", memgraph_uri="bolt://mg.example:7688",
                            memgraph_credentials={"bolt.username": "u", "bolt.password": "p"})
    assert read_graph(settings) == read_cypherl([sink_path])
    assert memgraph.connects == [{"host": "mg.example", "port": 7688, "scheme": "bolt", "username": "u",
                                  "password": "p"}]
    ((_, params),) = memgraph.executed()
    assert params == {"topic": "transfers"}


def test_the_demo_command_shows_its_options_and_refuses_a_bad_value_by_name():
    """`python -m mgstreams.demo` is a click command (like `mgstreams`): its help lists the README's options, and
    a bad value is refused before anything starts, naming the option."""
    import subprocess
    import sys

    helped = subprocess.run([sys.executable, "-m", "mgstreams.demo", "--help"], capture_output=True, text=True,
                            timeout=60)
    assert helped.returncode == 0, helped.stderr
    assert "Usage: python -m mgstreams.demo [OPTIONS]" in helped.stdout
    for option in ("--out DIR", "--seed N", "--events N", "--master", "--memgraph-uri URI"):
        assert option in helped.stdout, helped.stdout
    refused = subprocess.run([sys.executable, "-m", "mgstreams.demo", "--out", "never-made", "--events", "0"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "Invalid value for '--events'" in refused.stderr, refused.stderr
    assert not os.path.exists("never-made")
