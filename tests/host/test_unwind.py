"""Live Bolt writes in UNWIND batches (stream_registry/graph/unwind.py), checked against the pymgclient stand-in
(tests/support/mgclient_standin: a recording Cypher server that runs an UNWIND over maps as one execution per row).

- Folding keeps meaning, as a property: random batches of supported and unsupported statement shapes give the
  same statements, in the same order, whether sent folded or one at a time; unsupported shapes pass as they are.
- Through a real host (`mgstreams serve`, its stream process importing the stand-in as `mgclient`): a
  1000-message batch of one statement per message takes a handful of round trips, with every message's
  parameters exactly once and in order; the same with exactly-once offsets and with a poison message.
"""
from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path

import httpx
import pytest
from host_helpers import ROOT, HostProcess
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mgclient_standin import mgclient as standin
from stream_helpers import FAST_REJOIN, wait_until

from mgstreams.query_module import STREAMS_MODULE, QueryModule
from stream_registry.config import StreamConfig
from stream_registry.errors import ConfigError
from stream_registry.graph import sinks
from stream_registry.graph.offset_store import READ_QUERY, WRITE_QUERY, offset_statements
from stream_registry.graph.sink_faults import Fault, classify
from stream_registry.graph.sinks import BoltSink, open_sink
from stream_registry.graph.transform import Statement
from stream_registry.graph.unwind import ROWS_PARAMETER, fold, query_shape

MERGE_TRANSFORM = "stream_registry.builtin_transformations.merge_messages"
LABELS = ("A", "B")
NAMES = ("id", "id2", "v", "value", "rows", "mgstreams_rows")
# {p}, {q}, {r}: parameter names; literals and comments that hold `$` text must stay untouched
SUPPORTED = (
    "MERGE (n:{L} {{id: ${p}}}) SET n.v = ${q}",
    "CREATE (n:{L} {{id: ${p}, note: 'costs $5 and ${q}', other: \"${p}\"}})",
    "MATCH (a:{L} {{id: ${p}}}), (b:{L} {{id: ${q}}}) MERGE (a)-[r:R]->(b) SET r.w = ${r} // ${p} here",
    "MATCH (n:{L}) WHERE n.id IN ${p} SET n += ${q}",
    "MERGE (n:{L} {{id:${p}}}) ON CREATE SET n.first = ${q} ON MATCH SET n.last = ${q}",
    "MATCH (n:{L} {{id: ${p}}}) SET n.`odd $name` = ${q} /* ${r} */",
)
UNSUPPORTED = (
    "UNWIND ${p} AS x CREATE (:{L} {{v: x}})",
    "MATCH (n:{L}) WITH n LIMIT ${p} SET n.x = ${q}",
    "CREATE (n:{L} ${p})",
    "MATCH (n:{L} {{id: ${p}}}) DETACH DELETE n",
    "MATCH (n:{L}) WHERE n.id = ${p} RETURN count(n)",
    "CREATE (n:${p})",
    "MERGE (n:{L} {{id: ${p}}}) RETURN n ORDER BY n.id",
    "MATCH (a:{L} {{id: ${p}}}) CREATE (b:{L}) UNION MATCH (c:{L}) CREATE (d:{L} {{id: ${q}}})",
)

values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False)
    | st.text(alphabet=st.sampled_from("ab$'\"\\ {}:.x"), max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(NAMES), inner, max_size=3),
    max_leaves=6)


@st.composite
def queries(draw, templates=SUPPORTED + UNSUPPORTED):
    template = draw(st.sampled_from(templates))
    return template.format(L=draw(st.sampled_from(LABELS)), p=draw(st.sampled_from(NAMES)),
                           q=draw(st.sampled_from(NAMES)), r=draw(st.sampled_from(NAMES)))


@st.composite
def batches(draw):
    """Runs of a few query texts (what transformations produce), each statement with its query's parameters;
    now and then one lacks a parameter (one at a time Memgraph refuses it: never folded)."""
    texts = draw(st.lists(queries(), min_size=1, max_size=4))
    out = []
    for _ in range(draw(st.integers(1, 12))):
        query = draw(st.sampled_from(texts))
        names = sorted(set(_parameters(query)))
        parameters = {name: draw(values) for name in names}
        if names and draw(st.integers(0, 9)) == 0:
            parameters.pop(draw(st.sampled_from(names)))
        out.append((query, parameters))
    return out


def _parameters(query: str) -> list[str]:
    """The `$name`s of a query outside its literals and comments (the stand-in's own reading)."""
    code = re.sub(standin._LITERAL, "", query, flags=re.S)
    return re.findall(r"\$([A-Za-z_]\w*)", code)


def run(work, server: standin.Server) -> None:
    connection = server.connect()
    cursor = connection.cursor()
    for query, parameters in work:
        cursor.execute(query, parameters)
    connection.commit()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_folding_gives_the_same_statements_in_the_same_order_as_one_at_a_time(work):
    one_at_a_time, folded = standin.Server(rtt_ms=0), standin.Server(rtt_ms=0)
    run(work, one_at_a_time)
    sent = fold(work)
    run(sent, folded)
    assert folded.statements() == one_at_a_time.statements()
    assert folded.round_trips <= one_at_a_time.round_trips
    # what was not folded went as it was, in place; a folded statement stands for a run of one text
    at = 0
    for query, parameters in sent:
        if query.startswith(f"UNWIND ${ROWS_PARAMETER} AS mgstreams_row "):
            rows = parameters[ROWS_PARAMETER]
            run_ = work[at:at + len(rows)]
            assert len(rows) > 1 and len({q for q, _ in run_}) == 1 and query_shape(run_[0][0]).foldable
            assert [p for _, p in run_] == rows
            at += len(rows)
        else:
            assert (query, parameters) == work[at]
            at += 1
    assert at == len(work)


@given(queries(SUPPORTED), st.integers(2, 5))
def test_supported_shapes_are_folded(query, count):
    """Unless a parameter is named like the UNWIND's own variable."""
    work = [(query, {name: i for name in _parameters(query)}) for i in range(count)]
    assert fold(work) == work if "$mgstreams_rows" in query else len(fold(work)) == 1, query


@given(queries(UNSUPPORTED), st.integers(2, 5))
def test_unsupported_shapes_are_left_alone(query, count):
    work = [(query, {name: i for name in _parameters(query)}) for i in range(count)]
    assert not query_shape(query).foldable, query
    assert fold(work) == work


def test_a_run_is_one_stable_statement_of_the_used_parameters_and_a_single_statement_stays_plain():
    query = "MERGE (n:A {id: $id}) SET n.v = $v"
    first = fold([(query, {"id": 1, "v": "a", "unused": 0}), (query, {"id": 2, "v": "b"})])
    second = fold([(query, {"id": i, "v": i}) for i in range(500)])
    assert first[0][0] == second[0][0] == \
        "UNWIND $mgstreams_rows AS mgstreams_row MERGE (n:A {id: mgstreams_row.id}) SET n.v = mgstreams_row.v"
    assert first[0][1] == {ROWS_PARAMETER: [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]}   # rows: used names only
    assert fold([(query, {"id": 1, "v": 2})]) == [(query, {"id": 1, "v": 2})]
    assert fold([(query, {"id": 1})] * 2) == [(query, {"id": 1})] * 2     # $v missing: refused one at a time


# -- the Bolt sink -------------------------------------------------------------------------------------
BATCH = [Statement("CREATE (:Msg {offset: $offset})", {"offset": i}) for i in range(1000)]


# BEGIN, the stored offsets read (the exactly-once compare-and-set), the batch, COMMIT
@pytest.mark.parametrize("unwind, round_trips", [(True, 5), (False, 1005)])
def test_the_bolt_sink_folds_unless_told_not_to(monkeypatch, unwind, round_trips):
    server = standin.Server(rtt_ms=0)
    monkeypatch.setattr(sinks, "connect_mgclient", server.connect)
    with open_sink("bolt://memgraph:7687", bolt_unwind=unwind) as sink:
        sink.write([*BATCH, *offset_statements("s", {("t", 0): 1000, ("t", 1): 7})])
    assert server.round_trips == round_trips      # folded: the read, the messages' run, the offsets' run
    assert server.statements() == [(READ_QUERY, {"stream": "s"})] + [(s.query, dict(s.parameters)) for s in BATCH] + \
        [(WRITE_QUERY, {"stream": "s", "topic": t, "partition": p, "next_offset": o})
         for t, p, o in (("t", 0, 1000), ("t", 1, 7))]
    assert server.offsets == {("s", "t", 0): 1000, ("s", "t", 1): 7}


def test_a_failing_folded_statement_fails_the_batch_as_rejected_data(monkeypatch):
    server = standin.Server(rtt_ms=0, reject="poison")
    sink = BoltSink("memgraph", connect=server.connect, sleep=lambda s: None)
    batch = [Statement("CREATE (:Msg {p: $p})", {"p": "poison" if i == 7 else "ok"}) for i in range(10)]
    with pytest.raises(sinks.SinkError) as failed:
        sink.write(batch)
    # the message's fault (bisected), never transient; rejected=True needs pymgclient's own DatabaseError class,
    # which the stand-in has only when a host's processes import it as `mgclient`
    assert classify(failed.value) is Fault.MESSAGE and server.transactions == []
    sink.write(batch[:7])
    assert [p["p"] for _, p in server.statements()] == ["ok"] * 7


def test_bolt_unwind_is_a_stream_setting_and_a_bad_value_names_it():
    assert StreamConfig("s", ["t"], "127.0.0.1:9092", "m.f", "bolt://127.0.0.1").bolt_unwind is True
    with pytest.raises(ConfigError, match=r"^bolt_unwind: expected true or false, got 'no'"):
        StreamConfig("s", ["t"], "127.0.0.1:9092", "m.f", "bolt://127.0.0.1", bolt_unwind="no").validate()


# -- through a real host -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bolt_host(tmp_path_factory, quick_rebalance):
    """A host whose stream processes import the stand-in as `mgclient`, journaling every committed transaction
    with its statements; a statement whose parameters hold "poison" fails, as Memgraph fails a bad row."""
    tmp = tmp_path_factory.mktemp("bolt_host")
    journal = tmp / "journal.jsonl"
    host = HostProcess(tmp / "state", env={
        "PYTHONPATH": os.pathsep.join((standin.PYTHONPATH_ENTRY, str(ROOT / "tests" / "support"), str(ROOT))),
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
        streams.call("create", "u_single", [topic], kafka.bootstrap_servers, MERGE_TRANSFORM, "bolt://memgraph:7687",
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
            "transform": MERGE_TRANSFORM, "sink": "bolt://memgraph:7687",
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
