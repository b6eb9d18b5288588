"""Live Bolt writes in UNWIND batches (stream_registry/graph/unwind.py), checked against the pymgclient stand-in
(tests/support/mgclient_standin: a recording Cypher server that runs an UNWIND over maps as one execution per row).

- Folding keeps meaning, as a property: random batches of supported and unsupported statement shapes give the
  same statements, in the same order, whether sent folded or one at a time; unsupported shapes pass as they are.
- The Bolt sink folds a batch unless the stream says not to; tests/host/test_unwind_host.py runs it through a host.
"""
from __future__ import annotations

import re

import pytest
from examples import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mgclient_standin import mgclient as standin

from stream_registry.config import StreamConfig
from stream_registry.errors import ConfigError
from stream_registry.graph import sinks
from stream_registry.graph.offset_store import READ_QUERY, WRITE_QUERY, offset_statements
from stream_registry.graph.sink_faults import Fault, classify
from stream_registry.graph.sinks import BoltSink, open_sink
from stream_registry.graph.transform import Statement
from stream_registry.graph.unwind import ROWS_PARAMETER, fold, query_shape

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


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
    monkeypatch.setattr(sinks.bolt, "connect_driver", server.connect)
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


