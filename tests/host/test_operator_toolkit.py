"""Issue 13: the operator toolkit for offsets, on the embedded cluster.

Registry-level tests run the stream on a thread of this process (memory sinks);
the surface tests drive a real host process through the query module and the
CLI, as operators and Cypher users do.
"""
from __future__ import annotations

import datetime
import json
import time
import uuid
from functools import partial

import pytest
from broker_support import LIST_OFFSETS_BY_TIME, NO_LOG_START_MOVE, SLOW_FIRST_JOIN
from cli_helpers import invoke
from configs import MERGE, stream_config
from confluent_kafka import Producer
from kafka_records import commit_as
from stream_helpers import FAST_REJOIN, SETTLED_MS, by_partition, delivered_from_file, wait_until

from stream_registry import ChangeStatus, StreamError

MINUTE_MS = 60_000


pytestmark = pytest.mark.usefixtures("quick_rebalance")   # fresh groups: no initial rebalance delay to wait
# the streams here: memory sinks, recording each message's offset, batches of 100
config = partial(stream_config, batch_size=100)


def first_offsets(delivered) -> dict:
    return {tp: offsets[0] for tp, offsets in by_partition(delivered).items()}


# -- spec forms: a duration back from now, another group's commits --------------------------------------------
@LIST_OFFSETS_BY_TIME
def test_a_duration_lands_on_the_first_record_at_or_after_now_minus_it(kafka, registry, memory_sinks):
    """Record i of partition p is stamped base - (60 - i) min + 30 s: "-PT15M" (now = base + a few s) is
    record 45 on every partition; "-P1D" is before all of them; "-PT1S" after all of them (the end)."""
    topic = kafka.new_topic(partitions=2)
    base = int(time.time() * 1000)
    kafka.produce(topic, 120, partitions=2, timestamp_ms=lambda i: base - (60 - i // 2) * MINUTE_MS + 30_000)
    registry.create(config(kafka, topic))
    planned = registry.set_offset("orders", "-PT15M", dry_run=True)
    assert [(c.partition, c.offset, c.status) for c in planned] == [(p, 45, ChangeStatus.PLANNED) for p in (0, 1)]
    assert {c.offset for c in registry.set_offset("orders", "-P1D", dry_run=True)} == {0}
    at_end = registry.set_offset("orders", "-PT1S", dry_run=True)
    assert {c.offset for c in at_end} == {60} and all("-PT1S (" in c.message and "end" in c.message for c in at_end)
    per_partition = registry.set_offset("orders", {f"{topic}:0": "-PT15M", f"{topic}:1": "-PT30M"}, dry_run=True)
    assert [(c.partition, c.offset) for c in per_partition] == [(0, 45), (1, 30)]

    assert {c.status for c in registry.set_offset("orders", {f"{topic}:0": "-PT15M", topic: "-PT30M"})} == \
        {ChangeStatus.PENDING}
    registry.start("orders")
    sink = memory_sinks["orders"]
    wait_until(lambda: len(sink.delivered()) >= 15 + 30, what="the stream from the durations")
    assert first_offsets(sink.delivered()) == {(topic, 0): 45, (topic, 1): 30}


def test_bad_durations_change_nothing(kafka, registry, memory_sinks):
    topic = kafka.new_topic(partitions=1)
    registry.create(config(kafka, topic))
    for bad in ("-PT15X", "PT15M", "-P1W", {f"{topic}:0": "-P"}):
        with pytest.raises(StreamError) as info:
            registry.set_offset("orders", bad)
        assert (bad if isinstance(bad, str) else "-P") in str(info.value)
    assert registry.pending("orders") == [] and registry.history("orders") == []


def test_group_copies_another_groups_commits(kafka, registry, memory_sinks):
    topic = kafka.new_topic(partitions=3)
    kafka.produce(topic, 60, partitions=3)                  # offsets 0..19 on each partition
    registry.create(config(kafka, topic))
    other = f"other_{uuid.uuid4().hex[:8]}"
    commit_as(kafka, other, {(topic, 0): 4, (topic, 1): 11})   # partition 2: never committed by that group
    registry.set_offset("orders", 7)                        # pending; partition 2 keeps it
    changes = {c.partition: c for c in registry.set_offset("orders", {"group": other})}
    assert [(p, changes[p].offset, changes[p].status) for p in range(3)] == \
        [(0, 4, ChangeStatus.PENDING), (1, 11, ChangeStatus.PENDING), (2, 7, ChangeStatus.UNCHANGED)]   # where it resumes
    assert repr(other) in changes[2].message and "keeps its offset" in changes[2].message
    assert {(p.partition, p.offset) for p in registry.pending("orders")} == {(0, 4), (1, 11), (2, 7)}
    registry.start("orders")
    sink = memory_sinks["orders"]
    wait_until(lambda: len(sink.delivered()) >= 16 + 9 + 13, what="the copied offsets")
    assert first_offsets(sink.delivered()) == {(topic, 0): 4, (topic, 1): 11, (topic, 2): 7}
    assert sorted((h.partition, h.offset) for h in registry.history("orders")) == [(0, 4), (1, 11), (2, 7)]


def test_unknown_group_is_refused_naming_it(kafka, registry, memory_sinks):
    topic = kafka.new_topic(partitions=2)
    registry.create(config(kafka, topic))
    elsewhere = kafka.new_topic(partitions=1)
    ghost = f"ghost_{uuid.uuid4().hex[:8]}"
    commit_as(kafka, ghost, {(elsewhere, 0): 1})            # commits, but none on the stream's topic
    for spec in ({"group": ghost}, {f"{topic}:1": {"group": ghost}}):
        with pytest.raises(StreamError, match=f"unknown consumer group '{ghost}'"):
            registry.set_offset("orders", spec)
    assert registry.pending("orders") == [] and registry.history("orders") == []


# -- revert --------------------------------------------------------------------------------------------------
def test_revert_restores_the_previous_offset_and_redelivers_from_it(kafka, registry, memory_sinks):
    """The stream's group committed 6 on both partitions; "latest" is set while it is stopped and applied at
    the first assignment (previous: 6, as planned). Reverting partition 0's change moves it back to 6 and
    redelivers 6..9 there; partition 1 stays at the end. A poison message set aside is history, not a change."""
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 20, partitions=2)                   # offsets 0..9 on each partition
    registry.create(config(kafka, topic, transform="stream_helpers.poison_transform", errors_tolerance="all"))
    commit_as(kafka, registry.get("orders").consumer_group, {(topic, 0): 6, (topic, 1): 6})
    registry.set_offset("orders", "latest")
    registry.start("orders")
    wait_until(lambda: len(registry.history("orders")) == 2, what="the pending change applied")
    changes = {h.partition: h for h in registry.history("orders")}
    assert [(changes[p].previous_offset, changes[p].offset) for p in (0, 1)] == [(6, 10), (6, 10)]
    sink = memory_sinks["orders"]
    assert sink.delivered() == []

    change = changes[0].change_id
    planned = registry.revert("orders", change, dry_run=True, partitions=[0])   # one call, one change: both
    assert {c.partition for c in registry.revert("orders", change, dry_run=True)} == {0, 1}
    assert [(c.partition, c.previous_offset, c.offset, c.status) for c in planned] == \
        [(0, 10, 6, ChangeStatus.PLANNED)]
    assert planned[0].message == f"revert of change {change}"
    [reverted] = registry.revert("orders", change, partitions=[f"{topic}:0"])
    assert (reverted.partition, reverted.previous_offset, reverted.offset, reverted.status) == \
        (0, 10, 6, ChangeStatus.APPLIED)
    wait_until(lambda: len(sink.delivered()) >= 4, what="the redelivery")
    assert by_partition(sink.delivered()) == {(topic, 0): [6, 7, 8, 9]}
    newest = registry.history("orders")[0]
    assert (newest.partition, newest.previous_offset, newest.offset, newest.status, newest.message) == \
        (0, 10, 6, ChangeStatus.APPLIED, f"revert of change {change}")

    # a revert is a change too: reverting it moves partition 0 to the end again
    [again] = registry.revert("orders", newest.change_id)
    assert (again.offset, again.status, again.message) == (10, ChangeStatus.APPLIED,
                                                           f"revert of change {newest.change_id}")

    kafka.produce(topic, 1, partitions=1, payload=lambda i: b"poison pill")   # partition 0, offset 10: skipped
    wait_until(lambda: registry.history("orders")[0].status == ChangeStatus.SKIPPED, what="the poison message")
    poison = registry.history("orders")[0].change_id
    before = registry.describe("orders"), registry.history("orders"), registry.pending("orders")
    for bad, message in [(poison, f"change {poison} is a poison message set aside (skipped at {topic}:0@10)"),
                         (999_999, "no change 999999 in the history of stream 'orders'"),
                         (0, "change_id: must be a positive integer"), ("7", "got '7'"), (True, "got True")]:
        with pytest.raises(StreamError) as info:
            registry.revert("orders", bad)
        assert message in str(info.value), str(info.value)
    after = registry.describe("orders"), registry.history("orders"), registry.pending("orders")
    assert [(r.partition, r.committed_offset) for r in after[0]] == [(r.partition, r.committed_offset)
                                                                     for r in before[0]]
    assert after[1:] == before[1:]


@NO_LOG_START_MOVE
def test_revert_refuses_a_change_without_previous_offset_and_clamps_below_the_log_start(kafka, registry,
                                                                                       memory_sinks):
    """The group committed 1 on partition 0 and nothing on partition 1; "latest" is applied at the first
    assignment. Partition 1's change has no previous offset: refused, naming the id. Partition 0's previous
    offset is gone from the log once the embedded cluster drops the oldest record sets (past 5 MB): the
    revert clamps to the log start, and the result and the history say so."""
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 6, partitions=2)                    # offsets 0..2 on each partition
    registry.create(config(kafka, topic))
    commit_as(kafka, registry.get("orders").consumer_group, {(topic, 0): 1})
    registry.set_offset("orders", "latest")
    registry.start("orders")
    wait_until(lambda: len(registry.history("orders")) == 2, what="the pending change applied")
    changes = {h.partition: h for h in registry.history("orders")}
    assert [(changes[p].previous_offset, changes[p].offset) for p in (0, 1)] == [(1, 3), (None, 3)]
    with pytest.raises(StreamError, match=f"change_id: change {changes[1].change_id} \\({topic}:1 to 3\\) has no "
                                          "previous offset"):
        registry.revert("orders", changes[1].change_id)

    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 0})
    for _ in range(7):                                        # 6.3 MB: the first record sets are deleted
        producer.produce(topic, b"y" * 900_000, partition=0)
        producer.flush(30)
    log_start = registry.describe("orders")[0].log_start_offset
    assert log_start > 1, "the embedded cluster dropped the oldest records"
    [clamped] = registry.revert("orders", changes[0].change_id, partitions=[0])
    assert (clamped.partition, clamped.offset, clamped.status) == (0, log_start, ChangeStatus.CLAMPED), clamped
    note = f"revert of change {changes[0].change_id}; requested 1 is outside [{log_start}, 10]; clamped to log " \
           f"start {log_start}"
    assert clamped.message == note
    newest = registry.history("orders")[0]
    assert (newest.partition, newest.offset, newest.status, newest.message) == (0, log_start, ChangeStatus.CLAMPED,
                                                                                note)


# -- pending ---------------------------------------------------------------------------------------------------
def test_pending_lists_and_cancels_on_a_stopped_stream(kafka, registry, memory_sinks):
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 20, partitions=2)
    registry.create(config(kafka, topic, configs=SLOW_FIRST_JOIN))   # on Tansu the first join's wait is session / 2
    registry.describe("orders")   # the partitions' leaders known before the 1 s call below (a loaded machine)
    assert registry.pending("orders") == []
    before = time.time()
    registry.set_offset("orders", {f"{topic}:0": 4, f"{topic}:1": "latest"})
    rows = registry.pending("orders")
    assert [(r.topic, r.partition, r.offset) for r in rows] == [(topic, 0, 4), (topic, 1, 10)]
    assert all(before - 1 <= r.requested_at.timestamp() <= time.time() + 1 and r.requested_at.tzinfo for r in rows)
    assert registry.cancel_pending("orders") == rows
    assert registry.pending("orders") == [] and registry.cancel_pending("orders") == []
    registry.start("orders")                                  # from the beginning: nothing was kept
    wait_until(lambda: len(memory_sinks["orders"].delivered()) >= 20, what="every message")
    assert first_offsets(memory_sinks["orders"].delivered()) == {(topic, 0): 0, (topic, 1): 0}
    assert registry.history("orders") == []
    with pytest.raises(StreamError, match="'ghost'"):
        registry.pending("ghost")


def test_cancel_reaches_a_running_streams_consumer(kafka, registry, memory_sinks):
    """Set while the group's first assignment is still due (its initial rebalance delay, 3 s), the offset waits
    in the running consumer; cancelled there, the assignment starts from the committed offsets instead."""
    if kafka.embedded is not None:
        kafka.embedded.set_initial_rebalance_delay(3000)
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 20, partitions=2)
    registry.create(config(kafka, topic, configs=SLOW_FIRST_JOIN))   # on Tansu the first join's wait is session / 2
    registry.describe("orders")   # the partitions' leaders known before the 1 s call below (a loaded machine)
    registry.start("orders")
    changes = registry.set_offset("orders", 8, timeout=1.0)
    assert {c.status for c in changes} == {ChangeStatus.PENDING}, "assigned already: the test cannot tell"
    assert [(r.partition, r.offset) for r in registry.cancel_pending("orders")] == [(0, 8), (1, 8)]
    assert registry.pending("orders") == []
    wait_until(lambda: len(memory_sinks["orders"].delivered()) >= 20, what="every message")
    assert first_offsets(memory_sinks["orders"].delivered()) == {(topic, 0): 0, (topic, 1): 0}
    assert registry.history("orders") == []


# -- preview ----------------------------------------------------------------------------------------------------
def test_check_returns_the_statements_of_exactly_the_requested_offsets_and_changes_nothing(kafka, registry,
                                                                                          memory_sinks):
    topic = kafka.new_topic(partitions=3)
    kafka.produce(topic, 30, partitions=3)                   # offsets 0..9 on each partition
    registry.create(config(kafka, topic))
    # the default, "committed": where the stream resumes; none committed yet: auto.offset.reset, the beginning
    assert sorted((r.partition, r.offset) for r in registry.check("orders", limit=2)) == \
        [(p, o) for p in range(3) for o in (0, 1)]
    registry.start("orders")
    sink = memory_sinks["orders"]
    wait_until(lambda: all(r.committed_offset == 10 for r in registry.describe("orders")), what="caught up")
    before = registry.describe("orders"), len(sink.delivered()), registry.history("orders")

    rows = registry.check("orders", {f"{topic}:0": 3, f"{topic}:1": "earliest"}, limit=2)
    assert [(r.topic, r.partition, r.offset) for r in rows] == [(topic, 0, 3), (topic, 0, 4), (topic, 1, 0),
                                                                (topic, 1, 1)]
    assert {r.query for r in rows} == {"CREATE (:Msg {topic: $topic, partition: $partition, offset: $offset})"}
    assert [r.parameters for r in rows[:1]] == [{"topic": topic, "partition": 0, "offset": 3}]
    near_end = registry.check("orders", {f"{topic}:2": 8}, limit=5)
    assert [r.offset for r in near_end] == [8, 9], "stops at the log end, not at the limit"
    assert registry.check("orders", "latest") == []
    kafka.produce(topic, 3, partitions=3, payload=lambda i: b'{"late": true}')   # after the plan's log end
    assert [(r.partition, r.offset) for r in registry.check("orders", "-1", limit=1)] == [(0, 9), (1, 9), (2, 9)]

    wait_until(lambda: len(sink.delivered()) == before[1] + 3, what="the live stream's own records")
    after = registry.describe("orders")
    assert [(r.committed_offset, r.position, r.assigned) for r in after] == [(11, 11, True)] * 3
    assert sorted(o for _, _, o in sink.delivered()) == sorted(list(range(11)) * 3), "the sink got only its own"
    assert registry.history("orders") == before[2] == [] and registry.pending("orders") == []


def test_check_refuses_bad_limits_and_specs_naming_them(kafka, registry, memory_sinks):
    topic = kafka.new_topic(partitions=1)
    registry.create(config(kafka, topic))
    for limit, shown in [(0, "got 0"), (1001, "got 1001"), (True, "got True"), ("5", "got '5'")]:
        with pytest.raises(StreamError, match=f"^limit: must be an integer from 1 to 1000 .*{shown}"):
            registry.check("orders", limit=limit)
    with pytest.raises(StreamError, match="'-PT5Q'"):
        registry.check("orders", "-PT5Q")
    with pytest.raises(StreamError, match="unknown consumer group 'nobody_"):
        registry.check("orders", {"group": f"nobody_{uuid.uuid4().hex[:6]}"})


# -- the surfaces: a real host, driven by the CLI and by the query module ----------------------------------------
POISON_AT = {(0, 3), (1, 6), (2, 9)}    # (partition, offset): where the `copy` stream's poison_transform fails


@pytest.fixture
def toolkit(kafka, host, tmp_path):
    """A 3-partition topic, 10 records per partition stamped one minute apart up to 30 s ago (record j of a
    partition: now - (10 - j) min + 30 s, so "-PT5M" is offset 5), records (p, o) in POISON_AT reading
    `poison`; stream `orders` (merge_messages, cypherl sink) on it, running and caught up."""
    topic = kafka.new_topic(partitions=3)
    base = int(time.time() * 1000)
    kafka.produce(topic, 30, partitions=3, timestamp_ms=lambda i: base - (10 - i // 3) * MINUTE_MS + 30_000,
                  payload=lambda i: b"poison" if (i % 3, i // 3) in POISON_AT else f'{{"i": {i}}}'.encode())
    out = tmp_path / "orders.cypherl"
    with host.client() as client:
        client.create(name="orders", topics=[topic], bootstrap_servers=kafka.bootstrap_servers, transform=MERGE,
                      sink=f"cypherl://{out}", consumer_group=f"orders_{uuid.uuid4().hex[:8]}", batch_interval_ms=20,
                      configs=dict(FAST_REJOIN))
        client.start("orders")
        wait_until(lambda: [r.committed_offset for r in client.describe("orders")] == [10, 10, 10], timeout=30,
                   what="orders caught up")
    return type("Toolkit", (), {"topic": topic, "out": out, "host": host})


def cli(host, *args):
    """(exit code, stdout, stderr) of `mgstreams ARGS` in-process against `host`."""
    result = invoke(*args, host=host)
    return result.exit_code, result.stdout, result.stderr


def cli_json(host, *args):
    code, out, err = cli(host, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def sink_lines(path) -> int:
    """Statements in a cypherl file (its batches' frame lines are comments)."""
    return sum(1 for line in path.read_text().splitlines() if not line.startswith("//")) if path.exists() else 0


@LIST_OFFSETS_BY_TIME
def test_the_cli_previews_moves_reverts_exports_and_imports(toolkit, kafka, tmp_path):
    host, topic = toolkit.host, toolkit.topic
    with host.client() as client:
        state = lambda: ([(r.committed_offset, r.position, r.assigned) for r in client.describe("orders")],  # noqa
                         sink_lines(toolkit.out), client.history("orders"))
        before = state()

        # preview: the statements of exactly the offsets asked for; nothing moves, nothing is written
        rows = cli_json(host, "check", "orders", json.dumps({f"{topic}:0": 3}), "--limit", "2")
        assert [(r["partition"], r["offset"]) for r in rows] == [(0, 3), (0, 4)]
        assert all("MERGE (m:KafkaMessage" in r["query"] for r in rows)
        assert [(r["parameters"]["partition"], r["parameters"]["offset"], r["parameters"]["payload"])
                for r in rows] == [(0, 3, "poison"), (0, 4, '{"i": 12}')]
        code, out, _ = cli(host, "check", "orders", "-PT5M", "--limit", "1")
        assert code == 0 and [line.split()[:3] for line in out.splitlines()[1:]] == \
            [[topic, str(p), "5"] for p in range(3)], out
        assert cli(host, "check", "orders")[1].splitlines()[1:] == [], "from the committed offsets: at the end"
        assert state() == before

        # a duration back from now: the first record at or after now - 5 min
        changes = cli_json(host, "set-offset", "orders", "-PT5M", "--timeout", "5")
        assert [(c["partition"], c["previous_offset"], c["offset"], c["status"]) for c in changes] == \
            [(p, 10, 5, "applied") for p in range(3)]
        wait_until(lambda: sink_lines(toolkit.out) == before[1] + 15, what="the replay from 5")

        # another group's commits; the partition it never committed keeps its offset
        other = f"other_{uuid.uuid4().hex[:8]}"
        commit_as(kafka, other, {(topic, 0): 2, (topic, 1): 8})
        copied = cli_json(host, "set-offset", "orders", json.dumps({"group": other}), "--timeout", "5")
        assert [(c["partition"], c["offset"], c["status"]) for c in copied] == \
            [(0, 2, "applied"), (1, 8, "applied"), (2, 10, "unchanged")]
        assert copied[2]["message"] == f"group {other!r} has no committed offset for {topic}:2; it keeps its offset"

        # revert the copy of partition 0 (back to where it stood: 10)
        history = cli_json(host, "history", "orders")
        change = next(h for h in history if h["partition"] == 0 and h["offset"] == 2)
        [reverted] = cli_json(host, "revert", "orders", change["change_id"], "--partition", "0")
        assert (reverted["partition"], reverted["offset"], reverted["status"], reverted["message"]) == \
            (0, change["previous_offset"], "applied", f"revert of change {change['change_id']}")
        code, out, _ = cli(host, "history", "orders", "--limit", "1")
        header, row = out.splitlines()
        assert header.split()[0] == "CHANGE-ID" and header.split()[-1] == "MESSAGE"
        assert row.split()[0] == str(history[0]["change_id"] + 1)
        assert row.endswith(f"revert of change {change['change_id']}")
        for bad, message in [(999_999, "change_id: no change 999999 in the history of stream 'orders'")]:
            assert cli(host, "revert", "orders", bad) == (1, "", f"mgstreams: error: {message}\n")
        for bad_spec in ("-PT5X", json.dumps({"group": f"ghost_{uuid.uuid4().hex[:6]}"})):
            code, out, err = cli(host, "set-offset", "orders", bad_spec)
            assert code == 1 and out == "" and (bad_spec if "PT" in bad_spec else "unknown consumer group") in err

        # export -> import into a second stream: identical committed offsets
        client.create(name="src", topics=[topic], bootstrap_servers=kafka.bootstrap_servers, transform=MERGE,
                      sink=f"cypherl://{tmp_path / 'src.cypherl'}", consumer_group=f"src_{uuid.uuid4().hex[:8]}")
        commit_as(kafka, client.get("src").consumer_group, {(topic, p): o for p, o in POISON_AT})
        code, exported, err = cli(host, "offsets", "export", "src")
        assert (code, exported, err) == (0, "".join(f"{topic},{p},{o}\n" for p, o in sorted(POISON_AT)), "")
        code, out, err = cli(host, "offsets", "export", "src", "--source", "position")
        assert code == 1 and out == "" and err.count("has no position") == 3   # nothing to export: exit 1
        assert err.splitlines()[-1].startswith("mgstreams: error: source: stream 'src' is "), err
        offsets_file = tmp_path / "offsets.csv"
        offsets_file.write_text(exported)
        client.create(name="copy", topics=[topic], bootstrap_servers=kafka.bootstrap_servers,
                      transform="stream_helpers.poison_transform", sink=f"cypherl://{tmp_path / 'copy.cypherl'}",
                      consumer_group=f"copy_{uuid.uuid4().hex[:8]}", restart="never")
        bad_file = tmp_path / "bad.csv"
        bad_file.write_text(f"{topic},0,1\n{topic} 1\n")
        assert cli(host, "set-offset", "copy", "--from-file", bad_file) == \
            (1, "", f"mgstreams: error: --from-file {bad_file}: line 2: expected 'topic,partition,offset' or "
                    f"'TOPIC PARTITION OFFSET', got '{topic} 1'; nothing was applied\n")
        assert cli(host, "set-offset", "copy", "--from-file", tmp_path / "missing.csv")[0] == 2
        planned = cli_json(host, "set-offset", "copy", "--from-file", offsets_file, "--dry-run")
        assert {(c["partition"], c["offset"], c["status"]) for c in planned} == \
            {(p, o, "planned") for p, o in POISON_AT}
        assert client.pending("copy") == []
        rpk_file = tmp_path / "offsets.txt"
        rpk_file.write_text(exported.replace(",", " "))
        imported = cli_json(host, "set-offset", "copy", "--from-file", rpk_file)
        assert {(c["partition"], c["offset"], c["status"]) for c in imported} == \
            {(p, o, "pending") for p, o in POISON_AT}

        # pending: listed, cancelled, imported again, applied at start
        code, out, _ = cli(host, "pending", "copy")
        assert out.splitlines()[0].split()[:3] == ["TOPIC", "PARTITION", "OFFSET"]
        assert [line.split()[:3] for line in out.splitlines()[1:]] == [[topic, str(p), str(o)]
                                                                       for p, o in sorted(POISON_AT)]
        code, out, err = cli(host, "pending", "copy", "--cancel")
        assert code == 0 and len(out.splitlines()) == 4 and err == "cancelled 3 pending offset(s)\n"
        assert cli_json(host, "pending", "copy") == []
        cli_json(host, "set-offset", "copy", "--from-file", offsets_file)
        client.start("copy")
        wait_until(lambda: client.get("copy").status.value == "error", timeout=30,
                   what="copy failing on its first record (poison)")
        assert {(r.partition, r.committed_offset) for r in client.describe("copy")} == \
            {(r.partition, r.committed_offset) for r in client.describe("src")} == set(POISON_AT)
        assert cli(host, "offsets", "export", "copy")[1] == exported


def test_cancel_reaches_a_stream_process(kafka, host, tmp_path):
    """The cancel crosses the host's pipe to the stream's own process (see the registry-level test)."""
    if kafka.embedded is not None:
        kafka.embedded.set_initial_rebalance_delay(3000)
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, 20, partitions=2)
    out = tmp_path / "out.cypherl"
    with host.client() as client:
        client.create(name="orders", topics=[topic], bootstrap_servers=kafka.bootstrap_servers,
                      transform="stream_helpers.offsets_transform", sink=f"cypherl://{out}",
                      consumer_group=f"g_{uuid.uuid4().hex[:8]}", batch_interval_ms=20)
        client.start("orders")
        changes = client.set_offset("orders", 8, timeout=1.0)
        assert {c.status.value for c in changes} == {"pending"}, "assigned already: the test cannot tell"
        code, out_text, err = cli(host, "pending", "orders", "--cancel")
        assert code == 0 and [line.split()[:3] for line in out_text.splitlines()[1:]] == \
            [[topic, "0", "8"], [topic, "1", "8"]] and err == "cancelled 2 pending offset(s)\n"
        wait_until(lambda: len(delivered_from_file(out)) >= 20, what="every message")
        assert first_offsets(delivered_from_file(out)) == {(topic, 0): 0, (topic, 1): 0}
        assert client.history("orders") == [] and client.pending("orders") == []


@LIST_OFFSETS_BY_TIME
def test_the_procedures_preview_move_revert_and_cancel(toolkit, kafka, tmp_path):
    from mgp_backend import query_modules

    host, topic = toolkit.host, toolkit.topic
    with query_modules(host.url) as memgraph, host.client() as client:
        before = [(r.committed_offset, r.position) for r in client.describe("orders")], sink_lines(toolkit.out)
        rows = memgraph.call("streams.check", "orders", {f"{topic}:1": "earliest", f"{topic}:2": 8}, 3)
        assert [(r["topic"], r["partition"], r["offset"]) for r in rows] == \
            [(topic, 1, 0), (topic, 1, 1), (topic, 1, 2), (topic, 2, 8), (topic, 2, 9)]
        assert rows[0]["parameters"]["payload"] == '{"i": 1}' and rows[0]["query"].startswith("MERGE ")
        assert [r["offset"] for r in memgraph.call("streams.check", "orders", "-PT5M", 1)] == [5, 5, 5]
        assert memgraph.call("streams.check", "orders") == []     # committed: at the end
        assert ([(r.committed_offset, r.position) for r in client.describe("orders")], sink_lines(toolkit.out)) == \
            before
        assert memgraph.refusal("streams.check", "orders", "earliest", 1001).last_line == \
            "Exception: limit: must be an integer from 1 to 1000 (records per partition), got 1001"

        planned = memgraph.call("streams.set_stream_offset", "orders", {topic: "-PT5M", f"{topic}:0": "-P1D"},
                                10000, True)
        assert [(c["partition"], c["offset"], c["status"]) for c in planned] == \
            [(0, 0, "planned"), (1, 5, "planned"), (2, 5, "planned")]
        assert "'-PT5X'" in memgraph.refusal("streams.set_stream_offset", "orders", "-PT5X").last_line
        other = f"other_{uuid.uuid4().hex[:8]}"
        commit_as(kafka, other, {(topic, 2): 4})
        [copied] = [c for c in memgraph.call("streams.set_stream_offset", "orders", {"group": other}, SETTLED_MS)
                    if c["status"] != "unchanged"]
        assert (copied["partition"], copied["previous_offset"], copied["offset"], copied["status"]) == \
            (2, 10, 4, "applied")
        wait_until(lambda: sink_lines(toolkit.out) == before[1] + 6, what="partition 2 replayed from 4")

        [latest] = memgraph.call("streams.history", "orders")
        assert (latest["partition"], latest["offset"], latest["message"]) == (2, 4, "") and latest["change_id"] > 0
        [reverted] = memgraph.call("streams.revert", "orders", latest["change_id"])
        assert (reverted["partition"], reverted["offset"], reverted["status"], reverted["message"]) == \
            (2, 10, "applied", f"revert of change {latest['change_id']}")
        newest = memgraph.call("streams.history", "orders")[0]
        assert (newest["change_id"], newest["previous_offset"], newest["offset"], newest["message"]) == \
            (latest["change_id"] + 1, 10, 10, f"revert of change {latest['change_id']}")
        assert memgraph.refusal("streams.revert", "orders", 424242).last_line == \
            "Exception: change_id: no change 424242 in the history of stream 'orders'"
        assert memgraph.refusal("streams.revert", "orders", 0).last_line.startswith(
            "Exception: change_id: must be a positive integer")

        assert memgraph.call("streams.stop", "orders") == [{"name": "orders", "status": "stopped"}]
        memgraph.call("streams.set_stream_offset", "orders", {f"{topic}:1": 3})
        [waiting] = memgraph.call("streams.pending", "orders")
        assert (waiting["topic"], waiting["partition"], waiting["offset"], waiting["previous_offset"]) == \
            (topic, 1, 3, 10)
        assert abs(waiting["requested_at"] - datetime.datetime.now(datetime.UTC).replace(tzinfo=None)) < \
            datetime.timedelta(minutes=1), "UTC wall clock"
        assert memgraph.call("streams.pending", "orders", True) == [waiting]
        assert memgraph.call("streams.pending", "orders") == []
        assert [r.resume_offset for r in client.describe("orders")] == [10, 10, 10], "nothing left to apply"


def test_the_api_refuses_bad_requests_naming_the_value(host):
    import httpx

    with httpx.Client(base_url=host.url, timeout=30) as http:
        for method, path, body, status, error in [
            ("POST", "/streams/nope/history/1/revert", None, 404, "name: no stream named 'nope'"),
            ("GET", "/streams/nope/pending", None, 404, "name: no stream named 'nope'"),
            ("DELETE", "/streams/nope/pending", None, 404, "name: no stream named 'nope'"),
            ("POST", "/streams/nope/check", {"offset": "earliest"}, 404, "name: no stream named 'nope'"),
            ("POST", "/streams/nope/history/x1/revert", None, 400,
             "change_id: must be a positive integer (a history row's change_id), got 'x1'"),
            ("POST", "/streams/nope/history/0/revert", None, 400, "change_id: must be a positive integer"),
            ("POST", "/streams/nope/history/1/revert", {"dry_run": "yes"}, 400,
             "dry_run: must be true or false, got 'yes'"),
            ("POST", "/streams/nope/check", {"offsets": 1}, 400, "body: unknown field 'offsets'"),
            ("POST", "/streams/nope/check", {"timeout_ms": 0}, 400, "timeout_ms: must be a number of milliseconds"),
            ("GET", "/streams/nope/history/1/revert", None, 405, "method: GET is not allowed"),
            ("PUT", "/streams/nope/pending", None, 405, "method: PUT is not allowed"),
        ]:
            response = http.request(method, path, json=body)
            assert (response.status_code, response.json()["error"][:len(error)]) == (status, error), (path, body)
