"""Backfill into Memgraph over Bolt as Memgraph recommends, checked at the driver boundary
(`stream_registry.graph.sinks.bolt.connect_driver`, what pymgclient's `mgclient.connect` is given): UNWIND
batches, nodes before relationships, one transaction per batch, bounded writers per host, --prepare."""
from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from configs import MERGE
from mgclient_standin.mgclient import DatabaseError, Server, journal_entries

from mgstreams.cli.backfill import backfill as backfill_command
from spark_bridge.bolt_load import WriterSlots, prepare_statements
from spark_bridge.job import BackfillJob
from stream_registry.errors import ConfigError
from stream_registry.graph import sinks
from stream_registry.graph.transform import Statement
from stream_registry.graph.unwind import ROWS_PARAMETER, WriteKind, fold_statements, nodes_first, query_shape
from stream_registry.offset_spec import parse_offset_spec

NODE = "MERGE (a:Account {id: $id})"
REL = ("MATCH (a:Account {id: $src}), (b:Account {id: $dst}) MERGE (a)-[t:TRANSFER {id: $tid}]->(b) "
       "SET t.note = 'paid $5', t.amount = $amount")


# -- statements into UNWIND batches ------------------------------------------------------------------
def unwind_statements(batch):
    """What the backfill's Bolt sink sends: nodes first, then the sink's folding."""
    return fold_statements(nodes_first(batch))


def test_statements_become_unwind_batches_with_nodes_before_relationships():
    batch = []
    for i in range(3):
        batch += [Statement(REL, {"src": f"a{i}", "dst": f"b{i}", "tid": i, "amount": 1.5}),
                  Statement(NODE, {"id": f"a{i}"}), Statement(NODE, {"id": f"b{i}"})]
    node, rel = unwind_statements(batch)
    assert node.query == f"UNWIND ${ROWS_PARAMETER} AS mgstreams_row MERGE (a:Account {{id: mgstreams_row.id}})"
    assert node.parameters == {ROWS_PARAMETER: [{"id": x} for i in range(3) for x in (f"a{i}", f"b{i}")]}
    assert rel.query == (f"UNWIND ${ROWS_PARAMETER} AS mgstreams_row MATCH (a:Account {{id: mgstreams_row.src}}), "
                         "(b:Account {id: mgstreams_row.dst}) MERGE (a)-[t:TRANSFER {id: mgstreams_row.tid}]->(b) "
                         "SET t.note = 'paid $5', t.amount = mgstreams_row.amount")     # the literal is untouched
    assert [row["tid"] for row in rel.parameters[ROWS_PARAMETER]] == [0, 1, 2]


def test_order_is_kept_across_barriers_and_unrewritable_queries_pass_as_they_are():
    delete = Statement("MATCH (a:Account {id: $id}) DETACH DELETE a", {"id": "x"})
    props = Statement("CREATE (n:Thing $props)", {"props": {"k": 1}})
    batch = [Statement(REL, {"src": "a", "dst": "b", "tid": 1, "amount": 2}), Statement(NODE, {"id": "a"}),
             delete, Statement(NODE, {"id": "c"}), Statement(NODE, {"id": "d"}), props, props]
    out = unwind_statements(batch)
    assert [s.query for s in out[:3]] == [NODE, REL, delete.query]        # one statement each: no UNWIND needed
    assert out[3].parameters == {ROWS_PARAMETER: [{"id": "c"}, {"id": "d"}]}
    assert out[4:] == [props, props]                                      # `(n $props)` takes no row.field
    assert query_shape(delete.query).kind is WriteKind.BARRIER
    assert query_shape(REL).kind is WriteKind.RELATIONSHIP and query_shape(NODE).kind is WriteKind.NODE
    for query in ("MATCH (n) WHERE n.id IN $ids MERGE (m:Seen {id: n.id}) WITH m LIMIT $n SET m.x = 1",
                  "UNWIND $rows AS r MERGE (m:KafkaMessage {offset: r.offset})",
                  "MERGE (m:M {id: $id}) RETURN m LIMIT $n"):
        assert not query_shape(query).foldable, query
    assert query_shape("MATCH (n) WHERE n.id IN $ids SET n.x = $x").foldable
    keywords_as_names = query_shape("MERGE (n:Call {index: $index}) SET n.load = $load")   # names, not clauses
    assert keywords_as_names.kind is WriteKind.NODE and keywords_as_names.foldable


def test_prepare_statements_for_built_ins_and_declared_modules(tmp_path):
    assert prepare_statements(MERGE) == (
        "CREATE INDEX ON :KafkaMessage(topic, partition, offset);",
        "CREATE CONSTRAINT ON (m:KafkaMessage) ASSERT m.topic, m.partition, m.offset IS UNIQUE;")
    assert prepare_statements("stream_registry.builtin_transformations.create_messages") == \
        ("CREATE INDEX ON :KafkaMessage(topic, partition, offset);",)      # no constraint: replays CREATE again
    (tmp_path / "undeclared.py").write_text("def f(messages):\n    return []\n")
    with pytest.raises(ConfigError, match=r"prepare: no indexes or constraints are known for transform "
                                          r"'undeclared.f' \(built-ins: .*MGSTREAMS_PREPARE"):
        prepare_statements("undeclared.f", [str(tmp_path)])


# -- at the driver -----------------------------------------------------------------------------------
def memgraph(monkeypatch, *exists: str) -> Server:
    """The pymgclient stand-in as the Bolt sink's driver; statements starting with one of `exists` are refused
    as Memgraph refuses an index or constraint it has already."""
    server = Server(rtt_ms=0)
    server.fail_when = lambda query, parameters: query.startswith(exists) and DatabaseError("Index already exists")
    monkeypatch.setattr(sinks.bolt, "connect_driver", server.connect)
    return server


TRANSFERS = textwrap.dedent('''
    import json

    MGSTREAMS_PREPARE = ["CREATE INDEX ON :Account(id);", "CREATE CONSTRAINT ON (a:Account) ASSERT a.id IS UNIQUE;"]
    NODE = {node!r}
    REL = {rel!r}

    def transfers(messages):
        """Declares both: one relationship and two node statements per message (the relationship first)."""
        out = []
        for i in range(messages.total_messages()):
            m = messages.message_at(i)
            body = json.loads(bytes(m.payload()))
            out.append({{"query": REL, "parameters": {{"src": body["from"], "dst": body["to"],
                                                      "tid": f"{{m.partition()}}-{{m.offset()}}", "amount": 1.0}}}})
            out.append({{"query": NODE, "parameters": {{"id": body["from"]}}}})
            out.append({{"query": NODE, "parameters": {{"id": body["to"]}}}})
        return out
''').format(node=NODE, rel=REL)


def kind_of(query: str) -> str:
    """A statement of the backfill's transactions: node or relationship, folded (UNWIND) or a run of one."""
    body = query.removeprefix(f"UNWIND ${ROWS_PARAMETER} AS mgstreams_row ")
    return "node" if body.startswith("MERGE (a:Account") else "rel" if body.startswith("MATCH (a:Account") else query


def rows_of(parameters: dict) -> list[dict]:
    return parameters.get(ROWS_PARAMETER, [parameters])


def test_cli_local_bolt_backfill_prepares_then_writes_unwind_batches_one_transaction_each(kafka, tmp_path,
                                                                                        monkeypatch):
    driver = memgraph(monkeypatch, "CREATE INDEX")
    (tmp_path / "graph_tx.py").write_text(TRANSFERS)
    topic = kafka.new_topic(2)
    kafka.produce(topic, 50, partitions=2, payload=lambda i: json.dumps({"from": f"acc{i % 7}",
                                                                         "to": f"acc{i % 5}"}).encode())
    password = "pw-" + uuid.uuid4().hex
    monkeypatch.setenv("MGSTREAMS_SINK_PASSWORD", password)
    report = tmp_path / "report.json"
    result = CliRunner().invoke(backfill_command, [
        "--topics", topic, "--bootstrap-servers", kafka.bootstrap_servers, "--from", "earliest",
        "--transform", "graph_tx.transfers", "--modules-dir", str(tmp_path), "--sink", "bolt://memgraph:7688",
        "--sink-username", "loader", "--batch-size", "10", "--engine", "local", "--prepare", "--report", str(report)])
    assert result.exit_code == 0, result.output
    assert "prepare: CREATE INDEX ON :Account(id); exists" in result.stderr
    assert "prepare: CREATE CONSTRAINT ON (a:Account) ASSERT a.id IS UNIQUE; created" in result.stderr
    assert "note: for a first big import Memgraph recommends `STORAGE MODE IN_MEMORY_ANALYTICAL;`" in result.stderr
    # prepare: its own connection, autocommit (Memgraph refuses index changes in a multi-statement transaction)
    first = [e for e in driver.connections[0].log if e[0] == "execute"]
    assert [(e[3], e[1]) for e in first] == [(True, "CREATE INDEX ON :Account(id)"),
                                             (True, "CREATE CONSTRAINT ON (a:Account) ASSERT a.id IS UNIQUE")]
    assert driver.connects[0] == {"host": "memgraph", "port": 7688, "scheme": "bolt", "username": "loader",
                                  "password": password, "fingerprint": None, "engine": "memgraph"}
    # the load: 2 partitions x 25 messages in batches of 10 = 3 + 3 transactions of [nodes..., relationships...]
    # (node runs are cut where an account repeats: no UNWIND carries two rows for one node, unwind.fold)
    transactions = driver.sent()
    assert len(transactions) == 6
    rel_rows = []
    for tx in transactions:
        kinds = [kind_of(query) for query, _ in tx]
        assert kinds == sorted(kinds) and set(kinds) == {"node", "rel"}, kinds   # nodes first, then relationships
        nodes = [rows_of(p) for (_, p), kind in zip(tx, kinds, strict=True) if kind == "node"]
        rels = [row for (_, p), kind in zip(tx, kinds, strict=True) if kind == "rel" for row in rows_of(p)]
        assert sum(map(len, nodes)) == 2 * len(rels)
        assert all(len({row["id"] for row in run}) == len(run) for run in nodes)   # no key twice in one UNWIND
        rel_rows.append(rels)
    assert sorted(len(rels) for rels in rel_rows) == [5, 5, 10, 10, 10, 10]
    tids = [row["tid"] for rels in rel_rows for row in rels]
    assert sorted(tids) == sorted(f"{p}-{o}" for p in range(2) for o in range(25))
    assert not [e for e in driver.log if e[0] == "rollback"]
    # the password reached the driver and nothing else
    for text in (result.stdout, result.stderr, report.read_text()):
        assert password not in text


def test_run_autocommit_runs_alone_then_writes_are_transactions_again(monkeypatch):
    driver = memgraph(monkeypatch, "CREATE INDEX")
    sink = sinks.open_sink("bolt://memgraph:7687")
    sink.run_autocommit("CREATE CONSTRAINT ON (a:Account) ASSERT a.id IS UNIQUE")
    with pytest.raises(sinks.SinkError, match=r"^sink bolt://memgraph:7687: 'CREATE INDEX ON :Account\(id\)' "
                                              r"failed: DatabaseError: Index already exists$"):
        sink.run_autocommit("CREATE INDEX ON :Account(id)")
    seen = "MATCH (a:Account {id: $id}) SET a.seen = true"
    sink.write([Statement(NODE, {"id": "a"}), Statement(seen, {"id": "a"})])
    sink.close()
    executes = [(c.number, e[3], e[1]) for c in driver.connections for e in c.log if e[0] == "execute"]
    assert executes == [(0, True, "CREATE CONSTRAINT ON (a:Account) ASSERT a.id IS UNIQUE"),
                        (0, True, "CREATE INDEX ON :Account(id)"),
                        (0, False, NODE), (0, False, seen)]   # one connection; the write is in a transaction again
    assert driver.sent() == [[(NODE, {"id": "a"}), (seen, {"id": "a"})]]

    def refuse(**kwargs):
        raise ConnectionRefusedError("connection refused")
    monkeypatch.setattr(sinks.bolt, "connect_driver", refuse)
    with pytest.raises(sinks.SinkError, match=r"^sink bolt://memgraph:7687: cannot connect: "
                                              r"ConnectionRefusedError: connection refused$"):
        sinks.open_sink("bolt://memgraph:7687").run_autocommit("CREATE INDEX ON :A(id)")


def test_dry_run_lists_the_prepare_statements_and_touches_nothing(kafka, tmp_path, monkeypatch):
    monkeypatch.setattr(sinks.bolt, "connect_driver", lambda **kw: pytest.fail("connected during a dry run"))
    topic = kafka.new_topic(1)
    kafka.produce(topic, 5)
    result = CliRunner().invoke(backfill_command, [
        "--topics", topic, "--bootstrap-servers", kafka.bootstrap_servers, "--from", "earliest", "--transform", MERGE,
        "--sink", "bolt://memgraph:7687", "--prepare", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert ("prepare (not run, --dry-run): CREATE CONSTRAINT ON (m:KafkaMessage) ASSERT m.topic, m.partition, "
            "m.offset IS UNIQUE;") in result.stderr


def test_writer_slots_bound_concurrent_holders_across_processes(tmp_path):
    import multiprocessing

    slots = WriterSlots("bolt://h:1", 2, directory=str(tmp_path))
    context = multiprocessing.get_context("spawn")
    with slots.slot() as first, slots.slot() as second:
        assert {first, second} == {0, 1}
        probe = context.Process(target=_try_slot, args=(str(tmp_path), 2))
        probe.start()
        probe.join(2)
        assert probe.is_alive(), "a third writer got a slot while two were held"
    probe.join(10)
    assert probe.exitcode == 0


def _try_slot(directory: str, writers: int) -> None:
    with WriterSlots("bolt://h:1", writers, directory=directory).slot():
        pass


# -- under Spark: writers per executor host --------------------------------------------------------------
JOURNAL_DRIVER = textwrap.dedent('''
    from mgclient_standin.mgclient import Server
    from stream_registry.graph import sinks
    from stream_registry.builtin_transformations import merge_messages_batched

    # the pymgclient stand-in in the Python worker (tests/support is on the workers' PYTHONPATH: the `spark`
    # fixture): it journals each committed transaction with the worker's pid, when it began and ended; a batch's
    # one round trip (its UNWIND, alone in autocommit) takes 120 ms, as a remote server's write of it might: long
    # enough that two tasks writing at once overlap, even on a loaded machine
    sinks.bolt.connect_driver = Server(rtt_ms=120, journal={journal!r}).connect

    def load(messages):
        return merge_messages_batched(messages)
''')


def overlaps(journal: Path) -> int:
    """How many transactions began while another process's transaction was open."""
    transactions = journal_entries(journal)
    return sum(any(other["pid"] != t["pid"] and other["began"] <= t["began"] < other["ended"]
                   for other in transactions) for t in transactions)


@pytest.mark.spark
def test_spark_tasks_on_one_host_share_the_writer_bound(spark, kafka, tmp_path, monkeypatch):
    from spark_bridge.backfill import run_backfill

    # a BackfillJob loads its transformation when made, to check it: here too, not only in Spark's workers, so the
    # module below replaces the Bolt sink's driver in this process as well; the real one is put back afterwards
    # (left replaced, tests/integration/test_bolt_sink_graph.py wrote to the stand-in when run after this file)
    monkeypatch.setattr(sinks.bolt, "connect_driver", sinks.bolt.connect_driver)

    topic = kafka.new_topic(2)
    kafka.produce(topic, 48, partitions=2)
    seen = {}
    for writers in (1, 2):
        journal = tmp_path / f"journal-{writers}"
        module = f"journal_driver_{writers}"
        (tmp_path / f"{module}.py").write_text(JOURNAL_DRIVER.format(journal=str(journal)))
        job = BackfillJob(kafka.bootstrap_servers, (topic,), parse_offset_spec("earliest"), parse_offset_spec("latest"),
                          f"{module}.load", f"bolt://writers-{uuid.uuid4().hex[:8]}:7687",
                          search_dirs=(str(tmp_path),), batch_size=4, writers=writers)
        report = run_backfill(spark, job)
        assert report.records == 48 and sum(p.batches for p in report.partitions) == 12
        events = journal_entries(journal)
        assert sum(e["rows"] for e in events) == 48 and len({e["pid"] for e in events}) == 2
        seen[writers] = overlaps(journal)
    assert seen[1] == 0, "two transactions were open at once with --writers 1"
    assert seen[2] > 0, "with --writers 2 the two tasks never wrote at the same time (the bound is not what held)"
