"""The real graph server the tests write to (FalkorDB over Bolt 5, tests/support/graph_server.py), and the ways
its engine differs from Memgraph that the product's statements must survive. Each difference is asserted here as
the engine shows it, so that a FalkorDB release that changes one fails this file, not a sink test far away.

What Memgraph does instead is from its documentation: it stores map-valued properties, applies UNWIND rows in
order (a later row's SET wins), and rolls back an explicit transaction."""
from __future__ import annotations

import uuid

import neo4j
import pytest
from graph_server import bolt_driver, start_graph_server


@pytest.fixture
def driver(graph_server):
    with bolt_driver(graph_server.bolt_uri) as driver:
        yield driver


@pytest.fixture
def private_server(tmp_path):
    """A server of the test's own, for what leaves a server unusable."""
    server = start_graph_server(tmp_path)
    yield server
    server.close()


def label() -> str:
    return f"E{uuid.uuid4().hex[:8]}"


def test_bolt_writes_are_read_back_through_the_redis_port(graph_server, driver):
    name = label()
    with driver.session() as session:
        session.run(f"UNWIND $rows AS row MERGE (n:{name} {{k: row.k}}) SET n.v = row.v",
                    rows=[{"k": 1, "v": "a"}, {"k": 2, "v": 2.5}]).consume()
    rows = graph_server.query(f"MATCH (n:{name}) RETURN n.k AS k, n.v AS v ORDER BY k")
    assert rows == [{"k": 1, "v": "a"}, {"k": 2, "v": 2.5}]


def test_an_unwind_with_two_rows_for_one_key_keeps_the_first_rows_values(graph_server, driver):
    """Difference: FalkorDB plans MERGE ... SET over the UNWIND eagerly and keeps the FIRST row's values for a
    repeated key; Memgraph applies the rows in order and keeps the last. The product folds rows in order before
    it writes (graph/unwind.py), so its statements never carry two rows for one node."""
    name = label()
    with driver.session() as session:
        session.run(f"UNWIND $rows AS row MERGE (n:{name} {{k: row.k}}) SET n.v = row.v",
                    rows=[{"k": 1, "v": "first"}, {"k": 1, "v": "last"}]).consume()
    assert graph_server.query(f"MATCH (n:{name}) RETURN n.v AS v") == [{"v": "first"}]


def test_a_map_valued_property_is_refused(graph_server, driver):
    """Difference: FalkorDB refuses a map as a property value (Memgraph stores it): the statement fails and
    writes nothing."""
    name = label()
    with driver.session() as session, pytest.raises(neo4j.exceptions.Neo4jError):
        session.run(f"CREATE (:{name} {{m: $m}})", m={"a": 1}).consume()
    assert graph_server.query(f"MATCH (n:{name}) RETURN count(n) AS n") == [{"n": 0}]


def test_an_explicit_transaction_is_not_rolled_back(graph_server, driver):
    """Difference: FalkorDB applies each statement of an explicit Bolt transaction when it runs; ROLLBACK undoes
    nothing (Memgraph undoes both). One statement is atomic: a statement that fails part-way writes nothing."""
    name = label()
    with driver.session() as session:
        tx = session.begin_transaction()
        tx.run(f"CREATE (:{name} {{x: 1}})").consume()
        tx.run(f"CREATE (:{name} {{x: 2}})").consume()
        tx.rollback()
        with pytest.raises(neo4j.exceptions.Neo4jError):   # 10 / 0 fails on the second row, after the first
            session.run(f"UNWIND [1, 0] AS d CREATE (:{name} {{x: 10 / d}})").consume()
    assert graph_server.query(f"MATCH (n:{name}) RETURN n.x AS x ORDER BY x") == [{"x": 1}, {"x": 2}]


def test_a_restart_keeps_the_saved_graph_and_a_kill_loses_what_was_not_saved(graph_server):
    name = label()
    with bolt_driver(graph_server.bolt_uri) as driver, driver.session() as session:
        session.run(f"CREATE (:{name} {{x: 1}})").consume()
    graph_server.restart()
    assert graph_server.query(f"MATCH (n:{name}) RETURN n.x AS x") == [{"x": 1}]
    with bolt_driver(graph_server.bolt_uri) as again, again.session() as session:
        session.run(f"CREATE (:{name} {{x: 2}})").consume()
    graph_server.restart(kill=True)
    assert graph_server.query(f"MATCH (n:{name}) RETURN n.x AS x") == [{"x": 1}]


def test_parameters_are_printed_into_the_query_text(graph_server, driver):
    """Difference: FalkorDB's Bolt module does not pass parameters as values; it prints them into a
    `CYPHER name=value` prefix: a string with a quote fails, a float keeps 6 decimals (Memgraph: values)."""
    with driver.session() as session:
        assert session.run("RETURN $f AS f", f=0.1234567891).single()["f"] == pytest.approx(0.123457, abs=1e-9)
        with pytest.raises(neo4j.exceptions.Neo4jError):
            session.run("RETURN $s AS s", s="it's").consume()


def test_more_than_4096_bytes_of_parameters_crash_the_server(private_server):
    """Difference: the printed parameters go to a 4096-byte stack buffer; a batch past it kills the server."""
    with bolt_driver(private_server.bolt_uri) as driver, driver.session() as session:
        with pytest.raises(neo4j.exceptions.ServiceUnavailable):
            session.run("UNWIND $rows AS row RETURN count(row)", rows=["x" * 100] * 100).consume()
    private_server.process.wait(30)
    assert private_server.process.returncode != 0


def test_a_clients_goodbye_wedges_the_server(private_server):
    """Difference: the module frees a client on GOODBYE (the neo4j driver's `close()`) but leaves its socket in
    the event loop: the next connection given that descriptor gets no answer. So the sink closes FalkorDB
    connections without GOODBYE, and so does every test."""
    with neo4j.GraphDatabase.driver(private_server.bolt_uri, auth=None) as polite, polite.session() as session:
        session.run("RETURN 1").consume()
    with pytest.raises(neo4j.exceptions.ServiceUnavailable), neo4j.GraphDatabase.driver(
            private_server.bolt_uri, auth=None, connection_timeout=2, connection_acquisition_timeout=3) as next_one:
        next_one.verify_connectivity()
