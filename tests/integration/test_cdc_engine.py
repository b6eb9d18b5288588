"""The `debezium` transformation's statements run in a real graph engine (the `graph_server` fixture's FalkorDB)
on events from Debezium's documentation (support/debezium_corpus) and sequences derived from them: after each
sequence the graph must hold what the table holds. One test per defect of issue 43, and a hypothesis test of
random row histories per connector kind.
"""
from __future__ import annotations

import base64
import json

import pytest
from debezium_derived import MIRROR, Graph, event
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream_registry.graph.transform import Message, load_transformation, run_transformation

PLACEHOLDER = "__debezium_unavailable_value"


@pytest.fixture
def graph(graph_server):
    return Graph(graph_server)


def run(graph, records, options, topic="server1.inventory.customers"):
    """The records (key, value[, headers]) as one batch through the transformation, its statements into the graph."""
    messages = []
    for offset, record in enumerate(records):
        k, v, headers = (*record, ())[:3]
        messages.append(Message(topic, 0, offset, None if k is None else json.dumps(k).encode(),
                                None if v is None else json.dumps(v).encode(), 1_700_000_000_000, headers))
    statements = run_transformation(load_transformation(MIRROR, options=options), messages)
    graph.run(statements)
    return statements


PG = {"tables": ["public.customers"]}


def pg(op, row, lsn, **source):
    name = {"c": "postgresql-change-create-L763", "u": "postgresql-change-update-L1045", "r":
            "postgresql-change-create-L763", "d": "postgresql-change-delete-L1150"}[op]
    return {"id": row["id"]}, event(name, op, row, lsn=lsn, **source)


def test_defect1_a_toast_placeholder_keeps_the_stored_value(graph):
    run(graph, [pg("c", {"id": 1, "first_name": "Anne", "notes": "a long text"}, 100)], PG)
    run(graph, [pg("u", {"id": 1, "first_name": "Anne Marie", "notes": PLACEHOLDER}, 200)], PG)
    assert graph.table("public.customers") == {1: {"id": 1, "first_name": "Anne Marie", "notes": "a long text"}}
    # in one batch the placeholder takes the value the older event carried
    run(graph, [pg("u", {"id": 2, "first_name": "B", "notes": "kept"}, 300),
                pg("u", {"id": 2, "first_name": "B2", "notes": PLACEHOLDER}, 400)], PG)
    assert graph.table("public.customers")[2] == {"id": 2, "first_name": "B2", "notes": "kept"}


SQLSERVER = {"tables": ["dbo.customers"]}


def test_defect2_a_change_committed_during_the_snapshot_is_not_lost_to_the_reads_later_time(graph):
    """SQL Server: the snapshot read its row at commit_lsn S (ts_ms late), a change committed after S but
    before the read's time streams after it: the change's position is newer."""
    snap = "00000027:00000758:0001"
    read = event("sqlserver-change-create-L1045", "r", {"id": 1005, "first_name": "john"}, snapshot="true",
                 change_lsn=None, commit_lsn=snap, ts_ms=1559729999000, event_serial_no=None)
    update = event("sqlserver-change-update-L1317", "u", {"id": 1005, "first_name": "John Doe"},
                   change_lsn="00000027:00000759:0002", commit_lsn="00000027:00000759:0003",
                   ts_ms=1559729995000)
    run(graph, [({"id": 1005}, read)], SQLSERVER)
    run(graph, [({"id": 1005}, update)], SQLSERVER)
    assert graph.table("dbo.customers")[1005]["first_name"] == "John Doe"


def test_defect2_mysql_with_gtids_a_change_during_the_snapshot_is_newer_than_the_read(graph):
    """The read carries no GTID and no server id, and the time it read the row; the change streamed after the
    snapshot's binlog position carries a GTID and an earlier time."""
    read = event("shared-mariadb-mysql-change-create-L1143", "r", {"id": 1, "first_name": "read"},
                 snapshot="true", server_id=0, gtid=None, file="mysql-bin.000003", pos=154, ts_ms=1_700_000_900_000)
    change = event("shared-mariadb-mysql-change-update-L1442", "u", {"id": 1, "first_name": "changed"},
                   server_id=223344, gtid=f"{GTID_UUID}:24", file="mysql-bin.000003", pos=484,
                   ts_ms=1_700_000_100_000)
    run(graph, [({"id": 1}, read)], MYSQL)
    run(graph, [({"id": 1}, change)], MYSQL)
    assert graph.table("inventory.customers")[1]["first_name"] == "changed"


def test_defect2_oracle_and_db2_order_by_their_scn_and_lsn_not_time(graph):
    oracle = {"tables": ["DEBEZIUM.CUSTOMERS"]}
    newer = event("oracle-change-truncate-L1956", "u", {"ID": 1, "NAME": "new"}, table="CUSTOMERS",
                  scn="2000", commit_scn="2001", ts_ms=1)
    older = event("oracle-change-truncate-L1956", "u", {"ID": 1, "NAME": "old"}, table="CUSTOMERS",
                  scn="1000", commit_scn="1001", ts_ms=9_999_999_999_999)
    run(graph, [({"ID": 1}, newer)], oracle)
    run(graph, [({"ID": 1}, older)], oracle)
    assert graph.table("DEBEZIUM.CUSTOMERS", "ID")[1]["NAME"] == "new"


MYSQL = {"tables": ["inventory.customers"]}


def my(op, row, **source):
    name = {"c": "shared-mariadb-mysql-change-create-L1143", "u": "shared-mariadb-mysql-change-update-L1442",
            "d": "shared-mariadb-mysql-change-delete-L1566"}[op]
    return {"id": row["id"]}, event(name, op, row, **source)


def test_defect3_mysql_binlog_index_is_a_number_and_a_gtid_failover_is_ordered(graph):
    run(graph, [my("c", {"id": 1, "first_name": "a"}, file="mysql-bin.999999", pos=900, server_id=1)], MYSQL)
    run(graph, [my("u", {"id": 1, "first_name": "b"}, file="mysql-bin.1000000", pos=4, server_id=1)], MYSQL)
    assert graph.table("inventory.customers")[1]["first_name"] == "b"
    old_uuid, new_uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "8a94f357-aab4-11df-86ab-c80aa9429562"
    run(graph, [my("u", {"id": 2, "first_name": "x"}, file="mysql-bin.000123", pos=5000, gtid=f"{old_uuid}:23",
                   ts_ms=1_700_000_000_000)], MYSQL)
    # the new primary's binlog starts again at 000001, later in time: newer
    run(graph, [my("u", {"id": 2, "first_name": "y"}, file="mysql-bin.000001", pos=4, gtid=f"{new_uuid}:1",
                   ts_ms=1_700_000_100_000)], MYSQL)
    assert graph.table("inventory.customers")[2]["first_name"] == "y"


def test_defect4_a_decimal_primary_key_is_decoded_and_a_foreign_key_to_it_finds_its_node(graph):
    decimal = {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2"},
               "field": "id"}
    key_schema = {"type": "struct", "fields": [decimal]}
    row_schema = {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": [
        decimal, {"type": "string", "field": "first_name"}]}]}
    customer = event("postgresql-change-create-L763", "c", {"id": "AOo=", "first_name": "Anne"}, lsn=10)
    order_schema = {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": [
        {"type": "int32", "field": "id"}, {**decimal, "field": "purchaser"}]}]}
    order = event("postgresql-change-create-L763", "c", {"id": 7, "purchaser": "AOo="}, lsn=20, table="orders")
    options = {"tables": ["public.customers", "public.orders"], "labels": {"public.customers": "Customer"},
               "relationships": {"public.orders": {"purchaser": {"type": "PURCHASED_BY", "label": "Customer",
                                                                 "key": "id"}}}}
    run(graph, [({"schema": key_schema, "payload": {"id": "AOo="}}, {"schema": row_schema, "payload": customer}),
                ({"id": 7}, {"schema": order_schema, "payload": order})], options)
    assert graph.table("Customer") == {"2.34": {"id": "2.34", "first_name": "Anne"}}   # one node, decoded
    assert graph.count("MATCH (:`public.orders`)-[:PURCHASED_BY]->(c:Customer {id: '2.34'}) RETURN count(c)") == 1


def test_defect5_two_events_for_one_key_in_one_batch_the_newest_position_wins(graph):
    statements = run(graph, [pg("u", {"id": 1, "first_name": "Newest"}, 9000),
                             pg("u", {"id": 1, "first_name": "Stale"}, 5000)], PG)
    assert graph.table("public.customers") == {1: {"id": 1, "first_name": "Newest"}}
    assert [len(s.parameters["mgstreams_rows"]) for s in statements] == [1]   # one row per node
    # the other order: FalkorDB plans UNWIND ... MERGE ... SET eagerly, so with two rows for one node the first
    # row's SET would be the one that stays
    run(graph, [pg("u", {"id": 2, "first_name": "Stale"}, 5000), pg("u", {"id": 2, "first_name": "Newest"}, 9000)],
        PG)
    assert graph.table("public.customers")[2] == {"id": 2, "first_name": "Newest"}


def test_defect6_an_older_create_processed_after_the_delete_does_not_bring_the_row_back(graph):
    run(graph, [pg("c", {"id": 1, "first_name": "A"}, 100), pg("d", {"id": 1}, 300), ({"id": 1}, None)], PG)
    run(graph, [pg("u", {"id": 1, "first_name": "A replayed"}, 200)], PG)   # from another partition, or a replay
    assert graph.table("public.customers") == {}
    run(graph, [pg("c", {"id": 1, "first_name": "again"}, 400)], PG)   # a newer create does
    assert graph.table("public.customers") == {1: {"id": 1, "first_name": "again"}}
    # a truncate too: an older event after it changes nothing
    run(graph, [({"id": None}, event("postgresql-change-truncate-L1249", lsn=500)),
                pg("u", {"id": 1, "first_name": "before the truncate"}, 450)], PG)
    assert graph.table("public.customers") == {}


def test_defect7_tables_of_one_name_in_two_schemas_are_two_labels(graph):
    options = {"tables": ["sales.customers", "hr.customers"]}
    run(graph, [pg("c", {"id": 1, "first_name": "buyer"}, 10, schema="sales"),
                pg("c", {"id": 1, "first_name": "employee"}, 20, schema="hr")], options)
    assert graph.table("sales.customers")[1]["first_name"] == "buyer"
    assert graph.table("hr.customers")[1]["first_name"] == "employee"


def test_defect8_unwrap_rows_are_mirrored_and_other_records_are_skipped(graph):
    """The unwrap SMT with add.fields=op,table,lsn (value) or add.headers (headers); a delete rewritten with
    __deleted; heartbeats, schema changes and transaction metadata change nothing and fail nothing."""
    from debezium_derived import sample
    options = {"tables": ["inventory.customers"]}
    flat = {**sample("event-flattening-unwrapped-L210"), "__table": "customers", "id": 1, "name": "flat"}
    headers = [("__op", b"u"), ("__lsn", b"200"), ("__table", b"customers")]
    records = [
        ({"id": 1}, {k: v for k, v in flat.items()}),
        ({"id": 2}, {"id": 2, "name": "by headers"}, headers),
        ({"serverName": "PostgreSQL_server"}, sample("heartbeat-value")),
        (None, sample("sqlserver-schema-change-L668")),
        (None, sample("postgresql-transaction-begin-L457")),
        (None, sample("postgresql-transaction-end-L457-1")),
        ({"id": 1}, {"id": 1, "name": "flat", "__deleted": "true", "__op": "d", "__lsn": "123456790",
                     "__table": "customers"}),
    ]
    run(graph, records, options, topic="dbserver1.inventory.customers")
    assert graph.table("inventory.customers") == {2: {"id": 2, "name": "by headers"}}


def test_defect10_a_complete_resnapshot_removes_rows_deleted_while_the_connector_was_down(graph):
    run(graph, [pg("r", {"id": i, "first_name": f"r{i}"}, 100, snapshot="first" if i == 1 else
                   ("last" if i == 3 else "true")) for i in (1, 2, 3)], PG)
    run(graph, [pg("u", {"id": 4, "first_name": "streamed"}, 150)], PG)
    # the connector was down; rows 2 and 4 were deleted; a new snapshot at lsn 900 reads 1 and 3
    run(graph, [pg("r", {"id": 1, "first_name": "r1"}, 900, snapshot="first"),
                pg("r", {"id": 3, "first_name": "r3"}, 900, snapshot="last")], PG)
    assert set(graph.table("public.customers")) == {1, 3}
    run(graph, [pg("u", {"id": 2, "first_name": "replayed"}, 120)], PG)   # older than the snapshot: stays gone
    assert set(graph.table("public.customers")) == {1, 3}


def test_defect11_only_named_tables_and_only_this_streams_nodes_are_touched(graph):
    graph.server.query("CREATE (:`public.Secret` {id: 1, data: 'not CDC'}), (:`public.customers` {id: 1, "
                      "first_name: 'hand-made'})")
    secret = event("postgresql-change-truncate-L1249", table="Secret", lsn=10)
    run(graph, [({"id": 1}, event("postgresql-change-delete-L1150", "d", {"id": 1}, table="Secret", lsn=5)),
                (None, secret), pg("c", {"id": 2, "first_name": "mirrored"}, 20)], PG)
    assert graph.count("MATCH (n:`public.Secret`) RETURN count(n)") == 1   # not a mirrored table: skipped
    run(graph, [(None, event("postgresql-change-truncate-L1249", lsn=30))], PG)   # truncate: only its nodes
    assert graph.table("public.customers") == {1: {"id": 1, "first_name": "hand-made"}}
    run(graph, [pg("d", {"id": 1}, 40)], PG)   # a delete of a key a hand-made node has: not that node
    assert graph.table("public.customers") == {1: {"id": 1, "first_name": "hand-made"}}


# -- random row histories per connector kind, against the table they describe ---------------------------------
def _pg_event(op, row, n):
    return pg(op, row, 1000 + n * 10, **({"snapshot": "true"} if op == "r" else {}))


def _mysql_event(op, row, n):
    """With GTIDs; a snapshot read has none, no server id, and the (late) time it read the row."""
    name = "shared-mariadb-mysql-change-" + {"c": "create-L1143", "u": "update-L1442", "d": "delete-L1566",
                                             "r": "create-L1143"}[op]
    read = op == "r"
    return {"id": row["id"]}, event(name, op, row, file=f"mysql-bin.{n // 7 + 999998:06d}",
                                    pos=(n % 7) * 100 + 4, row=0, snapshot="true" if read else False,
                                    server_id=0 if read else 223344, gtid=None if read else f"{GTID_UUID}:{n}",
                                    ts_ms=1_900_000_000_000 if read else 1_465_581_029_100 + n * 1000)


GTID_UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def _sqlserver_event(op, row, n):
    name = "sqlserver-change-" + {"c": "create-L1045", "u": "update-L1317", "d": "delete-L1409",
                                  "r": "create-L1045"}[op]
    read = op == "r"   # a snapshot read: the snapshot's commit_lsn, no change_lsn, the time it was read (late)
    return {"id": row["id"]}, event(name, op, row, commit_lsn=f"00000027:{n:08x}:0005",
                                    change_lsn=None if read else f"00000027:{n:08x}:0002",
                                    ts_ms=2_000_000_000_000 if read else 1_500_000_000_000 + n,
                                    snapshot="true" if read else False)


def _oracle_event(op, row, n):
    """LogMiner's scn and commit_scn; a snapshot read has the snapshot's scn, no commit_scn, a late time."""
    read = op == "r"
    return {"id": row["id"]}, event("oracle-change-truncate-L1956", op, row, table="CUSTOMERS",
                                    scn=str(5000 + n * 10), commit_scn=None if read else str(5001 + n * 10),
                                    ts_ms=1_900_000_000_000 if read else 1_500_000_000_000 + n,
                                    snapshot="true" if read else "false")


KINDS = {"postgresql": ({"tables": ["public.customers"]}, "public.customers", _pg_event),
         "oracle": ({"tables": ["DEBEZIUM.CUSTOMERS"]}, "DEBEZIUM.CUSTOMERS", _oracle_event),
         "mysql": ({"tables": ["inventory.customers"]}, "inventory.customers", _mysql_event),
         "sqlserver": ({"tables": ["dbo.customers"]}, "dbo.customers", _sqlserver_event)}
STEP = st.one_of(st.tuples(st.just("upsert"), st.integers(1, 4), st.booleans()),
                 st.tuples(st.just("delete"), st.integers(1, 4), st.just(False)),
                 st.tuples(st.just("truncate"), st.just(0), st.just(False)),
                 st.tuples(st.just("resnapshot"), st.just(0), st.just(False)))


@settings(max_examples=40, deadline=None,  # no time checks: the machine may be loaded
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(kind=st.sampled_from(sorted(KINDS)), steps=st.lists(STEP, max_size=14), data=st.data())
def test_random_histories_leave_the_graph_equal_to_the_table(graph_server, kind, steps, data):
    """Per key the connector's order (Debezium keys partition by row); across keys any interleaving, batches of
    any size, and redeliveries of earlier events (a replay). The graph must equal the table."""
    options, label, make = KINDS[kind]
    graph = Graph(graph_server)
    table: dict[int, dict] = {}
    log: list = []   # (key or None for table-wide, record)
    for n, (what, row_id, toast) in enumerate(steps, start=1):
        if what == "upsert":
            op = "u" if row_id in table else "c"
            notes = table.get(row_id, {}).get("notes") if toast and row_id in table else f"n{n}"
            row = {"id": row_id, "first_name": f"v{n}", "notes": PLACEHOLDER if toast and row_id in table else notes}
            table[row_id] = {"id": row_id, "first_name": f"v{n}", "notes": notes}
            log.append((row_id, make(op, row, n)))
        elif what == "delete" and row_id in table:
            del table[row_id]
            log.append((row_id, make("d", {"id": row_id}, n)))
        elif what == "truncate" and kind != "sqlserver":   # SQL Server's connector emits no truncates
            table.clear()
            truncate = _truncate(kind, n)
            log.append((None, (None, truncate)))
        elif what == "resnapshot" and table:   # rows deleted while down were never streamed: forget some
            # (not all: a snapshot of an empty table writes no event, so nothing can say the rows are gone)
            for gone in data.draw(st.lists(st.sampled_from(sorted(table)), unique=True, max_size=len(table) - 1),
                                  label="deleted while down"):
                del table[gone]
            ids = sorted(table)
            for i, row_id in enumerate(ids):
                _, value = make("r", table[row_id], n)
                value["source"]["snapshot"] = "last" if i == len(ids) - 1 else ("first" if i == 0 else "true")
                log.append((None, ({"id": row_id}, value)))
    delivered = _deliver(log, data)
    for batch in delivered:
        run(graph, batch, options)
    assert graph.table(label) == table


def _truncate(kind, n):
    if kind == "postgresql":
        return event("postgresql-change-truncate-L1249", lsn=1000 + n * 10)
    if kind == "mysql":
        return event("shared-mariadb-mysql-change-truncate-L1679", file=f"mysql-bin.{n // 7 + 999998:06d}",
                     pos=(n % 7) * 100 + 4, server_id=223344, gtid=f"{GTID_UUID}:{n}",
                     ts_ms=1_465_581_029_100 + n * 1000)
    return event("oracle-change-truncate-L1956", table="CUSTOMERS", scn=str(5000 + n * 10),
                 commit_scn=str(5001 + n * 10), ts_ms=1_500_000_000_000 + n)


def _deliver(log, data):
    """Interleave per-key streams (table-wide events stay barriers), add replays, cut into batches."""
    out: list = []
    pending: dict = {}
    for key, record in log + [(None, None)]:
        if key is None:
            streams = [list(s) for s in pending.values()]
            while any(streams):
                choices = [i for i, s in enumerate(streams) if s]
                out.append(streams[data.draw(st.sampled_from(choices), label="partition")].pop(0))
            pending = {}
            if record is not None:
                out.append(record)
        else:
            pending.setdefault(key, []).append(record)
    replays = data.draw(st.lists(st.integers(0, max(len(out) - 1, 0)), max_size=3), label="replays") if out else []
    for at in sorted(replays, reverse=True):
        out.insert(data.draw(st.integers(at, len(out)), label="replayed at"), out[at])
    cuts = sorted(data.draw(st.lists(st.integers(0, len(out)), max_size=4), label="batch cuts"))
    return [out[a:b] for a, b in zip([0, *cuts], [*cuts, len(out)], strict=True) if out[a:b]]


def test_semantic_types_reach_the_statements_as_the_graphs_values():
    import datetime as dt
    schema = {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": [
        {"field": "born", "type": "int32", "name": "io.debezium.time.Date"},
        {"field": "seen", "type": "int64", "name": "io.debezium.time.MicroTimestamp"},
        {"field": "at", "type": "string", "name": "io.debezium.time.ZonedTimestamp"},
        {"field": "price", "type": "struct", "name": "io.debezium.data.VariableScaleDecimal"},
        {"field": "shape", "type": "struct", "name": "io.debezium.data.geometry.Point"}]}]}
    value = event("postgresql-change-create-L763", "c", {
        "id": 1, "born": 19000, "seen": 1_700_000_000_123_456, "at": "2024-01-02T03:04:05.123456789Z",
        "price": {"scale": 3, "value": base64.b64encode((12345).to_bytes(2, "big")).decode()},
        "shape": {"wkb": "AQEAAAA=", "srid": 4326}}, lsn=5)
    message = Message("t", 0, 0, b'{"id": 1}', json.dumps({"schema": schema, "payload": value}).encode(), 0)
    [statement] = run_transformation(load_transformation(MIRROR, options=PG), [message])
    row = statement.parameters["mgstreams_rows"][0]["properties"]
    assert row["born"] == dt.date(2022, 1, 8)
    assert row["seen"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456)
    assert row["at"] == dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC)
    assert row["price"] == "12.345" and json.loads(row["shape"]) == {"srid": 4326, "wkb": "AQEAAAA="}
