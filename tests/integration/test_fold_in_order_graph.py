"""Folded batches give the graph of their statements applied one at a time, in order, on a real engine that plans
UNWIND eagerly (FalkorDB keeps the first of two rows for one key, test_graph_engine.py): random batches go through
the Bolt sink (fold on) into the real server and through an in-order model, and the graphs are compared.

Fails without the cut in unwind.fold (a run with a repeated key): the server keeps an older row's value."""
from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream_registry.graph.sinks import open_sink
from stream_registry.graph.statement import Statement
from stream_registry.graph.unwind import fold

KEYS = st.integers(0, 3)
# floats exact in 15 digits: the Redis port the check reads through prints 15 (Bolt carries them whole)
VALUES = st.one_of(st.integers(-5, 5), st.text("ab'\"", max_size=3), st.integers(-4000, 4000).map(lambda i: i / 8))

SET_V = "MERGE (n:{L} {{k: $k}}) SET n.v = $v"
SET_W = "MERGE (n:{L} {{k: $k}}) SET n.w = $v"
TOUCH = "MATCH (n:{L} {{k: $k}}) SET n.c = $v"
LINK = "MATCH (a:{L} {{k: $a}}) MATCH (b:{L} {{k: $b}}) MERGE (a)-[r:R]->(b) SET r.x = $v"

STEPS = st.one_of(
    st.tuples(st.sampled_from([SET_V, SET_W, TOUCH]), KEYS, VALUES).map(lambda t: (t[0], {"k": t[1], "v": t[2]})),
    st.tuples(KEYS, KEYS, VALUES).map(lambda t: (LINK, {"a": t[0], "b": t[1], "v": t[2]})))


def in_order(steps) -> tuple[dict, dict]:
    """What one statement at a time gives: nodes by key with their properties, relationships by (a, b)."""
    nodes: dict[int, dict] = {}
    links: dict[tuple[int, int], object] = {}
    for query, p in steps:
        if query == LINK:
            if p["a"] in nodes and p["b"] in nodes:
                links[(p["a"], p["b"])] = p["v"]
        elif query == TOUCH:
            if p["k"] in nodes:
                nodes[p["k"]]["c"] = p["v"]
        else:
            nodes.setdefault(p["k"], {"k": p["k"]})["v" if query == SET_V else "w"] = p["v"]
    return nodes, links


@pytest.fixture(scope="module")
def sink(graph_server):
    sink = open_sink(f"{graph_server.bolt_uri}?engine=falkordb&retries=1")
    yield sink
    sink.close()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(STEPS, min_size=1, max_size=30))
def test_a_folded_batch_gives_the_in_order_graph(graph_server, sink, steps):
    label = f"F{uuid.uuid4().hex[:8]}"
    sink.write([Statement(query.format(L=label), parameters) for query, parameters in steps])
    nodes, links = in_order(steps)
    got_nodes = {row["p"]["k"]: row["p"] for row in graph_server.query(f"MATCH (n:{label}) RETURN properties(n) AS p")}
    got_links = {(row["a"], row["b"]): row["x"] for row in graph_server.query(
        f"MATCH (a:{label})-[r:R]->(b:{label}) RETURN a.k AS a, b.k AS b, r.x AS x")}
    assert got_nodes == nodes and got_links == links


def test_no_unwind_carries_two_rows_for_one_key():
    rows = [{"k": k, "v": i} for i, k in enumerate([1, 2, 1, 3, 3, 4])]
    folded = fold([(SET_V.format(L="N"), row) for row in rows])
    keys = [[row["k"] for row in parameters["mgstreams_rows"]] for _, parameters in folded]
    assert keys == [[1, 2], [1, 3], [3, 4]]   # in order, cut where a key repeats
    links = fold([(LINK.format(L="N"), {"a": 1, "b": b, "v": 0}) for b in (1, 2, 3, 2)])
    assert [len(parameters.get("mgstreams_rows", [parameters])) for _, parameters in links] == [3, 1]   # a hub: no cut
