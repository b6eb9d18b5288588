"""`tasks: N` through a real host: a stream run as N member processes of its consumer group.

The host's stream processes import the pymgclient stand-in as `mgclient` and journal every committed
transaction with the pid that committed it and its statements (tests/support/mgclient_standin): what each task
wrote to the Bolt sink, seen from outside the processes. The stand-in's exactly-once offsets live in each
process's memory, so these streams are at-least-once (docs/how-to/scale-with-tasks.md says how exactly-once
holds per sink).

The scenario documented in docs/how-to/scale-with-tasks.md: that page's commands are checked here.
"""
from __future__ import annotations

import os
import re
import signal
import uuid
from pathlib import Path

import httpx
import pytest
from broker_support import DEPARTED_LEADER_KEPT, skip_rest_on_tansu
from cli_helpers import invoke
from confluent_kafka import Consumer
from standin_journal import SINK, journaling_host, transactions, written
from stream_helpers import FAST_REJOIN, delivered_from_file, wait_until

from mgstreams.query_module import STREAMS_MODULE, QueryModule

PARTITIONS = 4
TRANSFORM = "stream_helpers.offsets_transform"


@pytest.fixture(scope="module")
def tasks_host(tmp_path_factory, quick_rebalance):
    host = journaling_host(tmp_path_factory.mktemp("tasks_host"))
    yield host, host.journal
    host.stop()


def body(kafka, topic: str, name: str, **fields) -> dict:
    return {"name": name, "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers, "transform": TRANSFORM,
            "sink": SINK, "consumer_group": f"tasks_{uuid.uuid4().hex[:8]}", "batch_size": 50,
            "batch_interval_ms": 50, "configs": FAST_REJOIN, "tasks": 2, **fields}


def covered(journal: Path, topic: str, per_partition: int) -> bool:
    seen = {(p, o) for _, p, o in written(journal, topic)}
    return all((p, o) in seen for p in range(PARTITIONS) for o in range(per_partition))


def split_between(api: httpx.Client, name: str) -> dict:
    """The stream when both tasks run and every partition is held, by task 0 or task 1."""
    info = api.get(f"/streams/{name}").json()
    rows = api.get(f"/streams/{name}/offsets").json()
    if info["status"] != "running" or len(info["pids"]) != 2 or {r["task"] for r in rows} != {0, 1}:
        return {}
    return {"info": info, "rows": rows}


def test_bad_tasks_are_refused_naming_the_field_and_the_value(kafka, tasks_host, tmp_path):
    host, _ = tasks_host
    topic = kafka.new_topic(partitions=1)
    with httpx.Client(base_url=host.url, timeout=30) as api:
        for value in (0, 33, "2", True):
            answer = api.post("/streams", json=body(kafka, topic, "bad_tasks", tasks=value))
            assert answer.status_code == 400 and answer.json()["error"].startswith("tasks:"), answer.text
            assert repr(value) in answer.json()["error"]
        out = tmp_path / "out.cypherl"   # exactly once: a cypherl stream's offsets live in one file
        answer = api.post("/streams", json=body(kafka, topic, "bad_tasks", sink=f"cypherl://{out}",
                                                delivery="exactly_once"))
        assert answer.status_code == 400 and "tasks: 2 with delivery exactly_once" in answer.json()["error"] \
            and "another file" in answer.json()["error"], answer.text
        assert api.get("/streams/bad_tasks").status_code == 404, "nothing was stored"
        api.post("/streams", json=body(kafka, topic, "one_task", tasks=1)).raise_for_status()
        answer = api.patch("/streams/one_task", json={"tasks": 0})
        assert answer.status_code == 400 and answer.json()["error"].startswith("tasks:"), answer.text
        assert api.get("/streams/one_task").json()["tasks"] == 1, "a refused alter changes nothing"
        api.delete("/streams/one_task").raise_for_status()
    # the command line: --tasks on create and alter, checked by the host as the API's field is
    made = invoke("create", "cli_tasks", "--topic", topic, "--bootstrap", kafka.bootstrap_servers, "--sink",
                  "null://", "--tasks", 3, host=host)
    assert made.exit_code == 0, made.output
    refused = invoke("alter", "cli_tasks", "--tasks", 40, host=host)
    assert refused.exit_code != 0 and "tasks: must be an integer from 1 to 32" in refused.output, refused.output
    assert invoke("alter", "cli_tasks", "--tasks", 2, host=host).exit_code == 0
    with httpx.Client(base_url=host.url, timeout=30) as api:
        assert api.get("/streams/cli_tasks").json()["tasks"] == 2
        api.delete("/streams/cli_tasks").raise_for_status()
    # Cypher: `tasks` in create's options map; list shows it
    with QueryModule(STREAMS_MODULE, host.url, token=host.token) as streams:
        streams.call("create", "cypher_tasks", [topic], kafka.bootstrap_servers, TRANSFORM, "null://", "", 100, 100,
                     {}, {}, "on-failure", {"tasks": 2})
        listed = [row for row in streams.call("list") if row["name"] == "cypher_tasks"]
        assert [(row["tasks"], row["pids"]) for row in listed] == [(2, [])]
        streams.call("drop", "cypher_tasks")


def test_a_tasks_2_stream_splits_its_partitions_between_two_processes_and_moves_them_all_in_one_change(
        kafka, tasks_host):
    host, journal = tasks_host
    topic = kafka.new_topic(partitions=PARTITIONS)
    kafka.produce(topic, PARTITIONS * 50, partitions=PARTITIONS)
    with httpx.Client(base_url=host.url, timeout=60) as api:
        created = api.post("/streams", json=body(kafka, topic, "split"))
        created.raise_for_status()
        assert created.json()["tasks"] == 2 and created.json()["pids"] == []
        api.put("/streams/split/start").raise_for_status()
        state = wait_until(lambda: split_between(api, "split"), 60, what="both tasks running, each holding partitions")
        pids = state["info"]["pids"]
        assert len(set(pids)) == 2 and host.proc.pid not in pids and state["info"]["pid"] == pids[0]
        assert all(r["assigned"] for r in state["rows"])
        wait_until(lambda: covered(journal, topic, 50), 60, what="every message written")
        # each partition was written by the process of the task that holds it (once rebalanced)
        holder = {r["partition"]: pids[r["task"]] for r in api.get("/streams/split/offsets").json()}
        assert {pid for pid, _, _ in written(journal, topic)} <= set(pids)

        # the group committed every write (at least once: a partition that changes hands before its commit is
        # delivered again from the last one, which is not what this test is about)
        wait_until(lambda: {r["committed_offset"] for r in api.get("/streams/split/offsets").json()} == {50}, 30,
                   what="every partition committed at 50", describe=lambda: api.get("/streams/split/offsets").json())
        before, before_tx = len(written(journal, topic)), len(transactions(journal, topic))
        moved = api.patch("/streams/split/offsets", json={"offset": 10, "timeout_ms": 30000})
        moved.raise_for_status()
        rows = moved.json()
        assert len(rows) == PARTITIONS and {r["status"] for r in rows} == {"applied"}, rows
        assert len({r["change_id"] for r in rows}) == 1, "one call, one change id, whichever task holds each"
        change_id = rows[0]["change_id"]
        history = [h for h in api.get("/streams/split/history").json() if h["change_id"] == change_id]
        assert sorted(h["partition"] for h in history) == list(range(PARTITIONS))
        assert all(h["offset"] == 10 for h in history)
        wait_until(lambda: {(p, o) for _, p, o in written(journal, topic)[before:]}
                   >= {(p, o) for p in range(PARTITIONS) for o in range(10, 50)}, 60,
                   what="every partition delivered again from 10")
        again = written(journal, topic)[before:]
        assert all(o >= 10 for _, _, o in again), \
            f"nothing before the new offset was delivered again: (pid, partition, offset) " \
            f"{[(x, p, o) for x, p, o in again if o < 10][:20]}; pids {pids}"
        assert all(pid == holder[p] for pid, p, _ in again), "each partition moved by the task that holds it"
        # the change shows in the graph at once: a partition's first write after it holds its record at 10 with no
        # other record of it (beside one record of each other partition at most), not a whole batch (50 records)
        after = transactions(journal, topic)[before_tx:]
        for partition in range(PARTITIONS):
            first_write = next(records for _, records in after if any(p == partition for p, _ in records))
            assert (partition, 10) in first_write and len({p for p, _ in first_write}) == len(first_write), \
                f"partition {partition}'s first write after the change: {first_write}"
        assert api.get("/streams/split/pending").json() == []
        # a revert reaches every task too: one new change moving every partition back where it stood
        reverted = api.post(f"/streams/split/history/{change_id}/revert", json={"timeout_ms": 30000})
        assert reverted.status_code == 200, reverted.text
        rows = reverted.json()
        assert {r["status"] for r in rows} == {"applied"} and {r["offset"] for r in rows} == {50}, rows
        assert len({r["change_id"] for r in rows}) == 1 and rows[0]["change_id"] > change_id
        assert api.get("/streams/split/pending").json() == []
        described = invoke("describe", "split", host=host)
        assert f"tasks 2, pids {pids[0]} {pids[1]}" in described.output, described.output
        # alter: the stream restarts as one task, which holds every partition
        skip_rest_on_tansu(DEPARTED_LEADER_KEPT)
        assert api.patch("/streams/split", json={"tasks": 1}).json()["tasks"] == 1
        one = wait_until(lambda: (info := api.get("/streams/split").json())["status"] == "running"
                         and len(info["pids"]) == 1 and info, 60,
                         what="the stream running as one task",
                         describe=lambda: (api.get("/streams/split").json(), api.get("/streams/split/offsets").json(),
                                           host.log()[-3000:]))
        assert one["pid"] == one["pids"][0] and one["pid"] not in pids
        wait_until(lambda: {r["task"] for r in api.get("/streams/split/offsets").json()} == {0}, 30,
                   what="task 0 holding every partition")
        api.delete("/streams/split").raise_for_status()


def test_a_killed_task_loses_no_record_its_partitions_go_to_the_other_and_it_is_restarted(kafka, tasks_host):
    host, journal = tasks_host
    topic = kafka.new_topic(partitions=PARTITIONS)
    with httpx.Client(base_url=host.url, timeout=60) as api:
        api.post("/streams", json=body(kafka, topic, "killed")).raise_for_status()
        api.put("/streams/killed/start").raise_for_status()
        pids = wait_until(lambda: split_between(api, "killed"), 60, what="both tasks running")["info"]["pids"]
        kafka.produce(topic, PARTITIONS * 20, partitions=PARTITIONS)
        wait_until(lambda: covered(journal, topic, 20), 60, what="the first messages written")
        victim, survivor = pids[1], pids[0]
        os.kill(victim, signal.SIGKILL)
        crashed = wait_until(lambda: (info := api.get("/streams/killed").json())["status"] == "error" and info,
                             10, interval=0.02, what="the stream says a task died")
        assert "task 1: stream process killed by signal 9 (SIGKILL); restarting in" in crashed["error"]
        kafka.produce(topic, PARTITIONS * 30, partitions=PARTITIONS)   # while task 1 is down or restarting
        wait_until(lambda: covered(journal, topic, 50), 90, what="every message written, none lost")
        back = wait_until(lambda: split_between(api, "killed"), 90, what="task 1 restarted, partitions split again")
        new_pids = back["info"]["pids"]
        assert survivor in new_pids and victim not in new_pids and len(new_pids) == 2
        assert back["info"]["error"] is None and back["info"]["restarts"] == 1
        # a batch the sink holds is committed just after it is written (at least once): the group catches up
        def offsets():
            return api.get("/streams/killed/offsets").json()

        def all_committed():
            rows = offsets()
            return all(r["committed_offset"] == 50 for r in rows) and rows
        committed = wait_until(all_committed, 30, what="every partition committed at 50", describe=offsets)
        assert {(r["partition"], r["position"]) for r in committed} == {(p, 50) for p in range(PARTITIONS)}
        api.delete("/streams/killed").raise_for_status()


def test_a_change_pending_at_start_is_applied_once_whichever_task_gets_each_partition(kafka, tasks_host):
    """Both tasks start holding the stopped stream's pending change; the partitions reach them through the
    group's rebalances (a first task may hold them all before the second joins): each partition is moved once,
    by the task that has it, and never again by a task it moves to later."""
    host, journal = tasks_host
    topic = kafka.new_topic(partitions=PARTITIONS)
    kafka.produce(topic, PARTITIONS * 40, partitions=PARTITIONS)
    with httpx.Client(base_url=host.url, timeout=60) as api:
        api.post("/streams", json=body(kafka, topic, "pending_tasks")).raise_for_status()
        rows = api.patch("/streams/pending_tasks/offsets", json={"offset": 30}).json()
        assert {r["status"] for r in rows} == {"pending"} and len({r["change_id"] for r in rows}) == 1, rows
        change_id = rows[0]["change_id"]
        api.put("/streams/pending_tasks/start").raise_for_status()
        wait_until(lambda: split_between(api, "pending_tasks"), 60, what="both tasks running")
        wait_until(lambda: {(p, o) for _, p, o in written(journal, topic)}
                   >= {(p, o) for p in range(PARTITIONS) for o in range(30, 40)}, 60, what="delivered from 30")
        kafka.produce(topic, PARTITIONS * 10, partitions=PARTITIONS)
        wait_until(lambda: all(r["committed_offset"] == 50 for r in api.get("/streams/pending_tasks/offsets").json()),
                   60, what="every partition committed to its end")
        history = [h for h in api.get("/streams/pending_tasks/history").json() if h["change_id"] == change_id]
        assert sorted(h["partition"] for h in history) == list(range(PARTITIONS)), history
        assert api.get("/streams/pending_tasks/pending").json() == []
        delivered = written(journal, topic)
        assert min(o for _, _, o in delivered) == 30, "nothing before the pending change's offset was delivered"
        # A batch commit the group refused while it rebalanced (REBALANCE_IN_PROGRESS, seen under load) leaves the
        # partition committed at 30, the change's own commit: its next owner reads 30.. again, at least once, as
        # Kafka's consumers do. Then the history's one row per partition above says it was moved once.
        refused = re.search(r"stream pending_tasks: (commit failed|commit not made|the commit of revoked)",
                            host.log())
        for p in range(PARTITIONS):   # moved once: offset 30 of each partition is delivered once
            assert refused or sum(1 for _, q, o in delivered if (q, o) == (p, 30)) == 1, \
                [d for d in delivered if d[1] == p]
        api.delete("/streams/pending_tasks").raise_for_status()


def test_a_cancel_reaches_every_task_and_a_cancelled_change_is_never_applied_by_the_task_that_gets_it_later(
        kafka, tasks_host):
    """A member outside the stream holds some partitions: the change is applied on the tasks' partitions and
    waits for the others in both tasks' gates. The cancel reaches both tasks; when the outsider leaves and the
    tasks take its partitions, they resume them from the group's commits, not from the cancelled target."""
    host, journal = tasks_host
    topic = kafka.new_topic(partitions=PARTITIONS)
    kafka.produce(topic, PARTITIONS * 20, partitions=PARTITIONS)
    stream = body(kafka, topic, "cancelled", configs={**FAST_REJOIN, "partition.assignment.strategy": "range"})
    outsider = None
    with httpx.Client(base_url=host.url, timeout=60) as api:
        api.post("/streams", json=stream).raise_for_status()
        api.put("/streams/cancelled/start").raise_for_status()
        wait_until(lambda: split_between(api, "cancelled"), 60, what="both tasks running")
        wait_until(lambda: covered(journal, topic, 20), 60, what="every message written")
        wait_until(lambda: all(r["committed_offset"] == 20 for r in api.get("/streams/cancelled/offsets").json()),
                   30, what="every message committed")
        outsider = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": stream["consumer_group"],
                             "partition.assignment.strategy": "range", "enable.auto.commit": False, **FAST_REJOIN})
        held: list[int] = []

        def assigned(consumer, parts) -> None:   # range is eager: each assignment is the whole of it
            held[:] = [p.partition for p in parts]
        outsider.subscribe([topic], on_assign=assigned)
        try:
            wait_until(lambda: outsider.poll(0.1) is None and held, 60, what="the outsider's assignment")
            # the outsider keeps polling: a rebalance after its first assignment (a task rejoining late, on a
            # loaded machine) completes only once every member, the outsider too, has joined again
            wait_until(lambda: outsider.poll(0.1) is None and
                       {r["partition"] for r in api.get("/streams/cancelled/offsets").json()
                        if r["task"] is None} == set(held), 30, what="the tasks holding the rest",
                       describe=lambda: (held, api.get("/streams/cancelled/offsets").json()))
            rows = {r["partition"]: r for r in api.patch("/streams/cancelled/offsets",
                                                          json={"offset": 5, "timeout_ms": 3000}).json()}
            assert {p for p, r in rows.items() if r["status"] == "pending"} == set(held), rows
            assert {r["status"] for p, r in rows.items() if p not in held} == {"applied"}, rows
            cancelled = api.delete("/streams/cancelled/pending")
            cancelled.raise_for_status()
            assert sorted(r["partition"] for r in cancelled.json()) == sorted(held)
            before = len(written(journal, topic))
        finally:
            outsider.close()   # the group gives its partitions to the tasks once its session times out
        wait_until(lambda: {r["task"] for r in api.get("/streams/cancelled/offsets").json()} <= {0, 1}, 60,
                   what="the tasks holding every partition")
        kafka.produce(topic, PARTITIONS * 5, partitions=PARTITIONS)
        wait_until(lambda: {(p, o) for _, p, o in written(journal, topic)[before:]}
                   >= {(p, o) for p in held for o in range(20, 25)}, 60, what="the outsider's partitions go on")
        again = [(p, o) for _, p, o in written(journal, topic)[before:] if p in held]
        assert min(o for _, o in again) >= 20, f"a cancelled change moved a partition back: {again}"
        assert api.get("/streams/cancelled/pending").json() == []
        history = [h for h in api.get("/streams/cancelled/history").json() if h["change_id"] == rows[held[0]]["change_id"]]
        assert not {h["partition"] for h in history} & set(held), history
        api.delete("/streams/cancelled").raise_for_status()


def test_a_cypherl_stream_with_two_tasks_writes_a_file_per_task_at_least_once(kafka, tasks_host, tmp_path):
    """Issue 46: `tasks: 2` was refused for any cypherl stream, while the docs said the limit was exactly-once's.
    At least once, each task writes a file of its own beside the one named (`out.task-0.cypherl`,
    `out.task-1.cypherl`: `out.task-*.cypherl` finds them all), and together they hold every record."""
    host, _ = tasks_host
    topic = kafka.new_topic(partitions=2)
    out = tmp_path / "out.cypherl"
    with httpx.Client(base_url=host.url, timeout=60) as api:
        created = api.post("/streams", json=body(kafka, topic, "files", sink=f"cypherl://{out}"))
        assert created.status_code == 201, created.text
        started = api.put("/streams/files/start")
        assert started.status_code == 200, started.text
        wait_until(lambda: split_between(api, "files"), 90, what="a partition held by each task")
        kafka.produce(topic, 40, partitions=2)
        files = [tmp_path / f"out.task-{i}.cypherl" for i in (0, 1)]

        def every_record() -> bool:
            seen = {(p, o) for f in files if f.exists() for _, p, o in delivered_from_file(f)}
            return seen == {(p, o) for p in (0, 1) for o in range(20)}
        wait_until(every_record, 90, what="every record in the tasks' files")
        assert sorted(tmp_path.glob("out.task-*.cypherl")) == files and not out.exists()
        assert all(delivered_from_file(f) for f in files), "each task wrote its own file"
        api.delete("/streams/files").raise_for_status()
