"""Live Bolt writes in UNWIND batches through a real host (`mgstreams serve`, its stream processes importing the
pymgclient stand-in, tests/support/mgclient_standin, as `mgclient`): a 1000-message batch of one statement per
message takes a handful of round trips, with every message's parameters exactly once and in order; the same with
exactly-once offsets and with a poison message. tests/unit/test_unwind.py checks the folding itself.
"""
from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import httpx
import pytest
from configs import MERGE
from host_helpers import HostProcess
from mgclient_standin import mgclient as standin
from paths import ROOT, SUPPORT
from stream_helpers import FAST_REJOIN, wait_until

from mgstreams.query_module import STREAMS_MODULE, QueryModule
from stream_registry.graph.offset_store import WRITE_QUERY


# -- through a real host -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bolt_host(tmp_path_factory, quick_rebalance):
    """A host whose stream processes import the stand-in as `mgclient`, journaling every committed transaction
    with its statements; a statement whose parameters hold "poison" fails, as Memgraph fails a bad row."""
    tmp = tmp_path_factory.mktemp("bolt_host")
    journal = tmp / "journal.jsonl"
    host = HostProcess(tmp / "state", env={
        "PYTHONPATH": os.pathsep.join((standin.PYTHONPATH_ENTRY, str(SUPPORT), str(ROOT))),
        "MGCLIENT_STANDIN_JOURNAL": str(journal), "MGCLIENT_STANDIN_RECORD": "rows",
        "MGCLIENT_STANDIN_RTT_MS": "0", "MGCLIENT_STANDIN_REJECT": "poison",
        "MGSTREAMS_ALLOWED_HOSTS": "memgraph,localhost,127.0.0.0/8"}).start()   # the sink's host, by name
    yield host, journal
    host.stop()


def transactions(journal: Path, topic: str) -> list[dict]:
    """The committed transactions that wrote messages of `topic`."""
    out = []
    for line in journal.read_text().splitlines() if journal.exists() else []:
        entry = json.loads(line)
        if any(params.get("topic") == topic for _, params in entry["statements"]):
            out.append(entry)
    return out


def messages_written(entries: list[dict], topic: str) -> list[int]:
    return [params["offset"] for entry in entries for query, params in entry["statements"]
            if query != WRITE_QUERY and params.get("topic") == topic]


def test_bolt_unwind_false_from_cypher_writes_one_statement_per_round_trip(kafka, bolt_host):
    """`options: {bolt_unwind: false}` on `CALL streams.create` reaches the stream's sink."""
    host, journal = bolt_host
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 300, partitions=1)
    with QueryModule(STREAMS_MODULE, host.url, token=host.token) as streams:
        streams.call("create", "u_single", [topic], kafka.bootstrap_servers, MERGE, "bolt://memgraph:7687",
                     f"unwind_{uuid.uuid4().hex[:8]}", 1000, 3000, FAST_REJOIN, {}, "on-failure",
                     {"bolt_unwind": False})
        streams.call("start", "u_single")
        wait_until(lambda: len(messages_written(transactions(journal, topic), topic)) >= 300, 60,
                   what="300 messages in the journal")
        streams.call("stop", "u_single")
    entries = transactions(journal, topic)
    assert messages_written(entries, topic) == list(range(300))
    assert sum(e["executes"] for e in entries) == 300 and all(e["round_trips"] == e["executes"] + 2 for e in entries)


@pytest.mark.parametrize("case", ["at_least_once", "exactly_once", "poison"])
def test_a_host_writes_a_1000_message_batch_in_a_handful_of_round_trips(kafka, bolt_host, case):
    host, journal = bolt_host
    topic = kafka.new_topic(partitions=1)
    kafka.produce(topic, 1000, partitions=1,
                  payload=lambda i: b"poison!" if case == "poison" and i == 500 else b'{"i": %d}' % i)
    name = f"u_{case}"
    body = {"name": name, "topics": [topic], "bootstrap_servers": kafka.bootstrap_servers,
            "transform": MERGE, "sink": "bolt://memgraph:7687",
            "consumer_group": f"unwind_{uuid.uuid4().hex[:8]}", "batch_size": 1000, "batch_interval_ms": 3000,
            "configs": FAST_REJOIN,
            **({"delivery": "exactly_once"} if case == "exactly_once" else {}),
            **({"errors.tolerance": "all"} if case == "poison" else {})}
    with httpx.Client(base_url=host.url, timeout=30) as api:
        api.post("/streams", json=body).raise_for_status()
        api.put(f"/streams/{name}/start").raise_for_status()
        expected = [i for i in range(1000) if not (case == "poison" and i == 500)]
        wait_until(lambda: len(messages_written(transactions(journal, topic), topic)) >= len(expected), 60,
                   what="the batch in the journal")
        api.put(f"/streams/{name}/stop").raise_for_status()
    entries = transactions(journal, topic)
    assert messages_written(entries, topic) == expected          # each message once, in offset order
    if case == "poison":   # bisected around message 500: about 2 log2(1000) transactions, every one small
        assert len(entries) <= 25 and all(e["round_trips"] <= 5 for e in entries), entries
        return
    assert len(entries) <= 2, [e["rows"] for e in entries]      # the first batch may be cut by its interval
    for entry in entries:
        assert entry["round_trips"] <= 5 and entry["executes"] <= 3, entry
    if case == "exactly_once":   # the offsets went in the batch's own transaction
        last = entries[-1]["statements"][-1]
        assert last == [WRITE_QUERY, {"stream": name, "topic": topic, "partition": 0, "next_offset": 1000}]
