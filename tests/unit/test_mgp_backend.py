"""The test backend behaves like Memgraph where query modules can tell the difference."""
from __future__ import annotations

import sys
import textwrap

import pytest
from mgp_backend import Node, QueryError, mgp_environment

DEMO = textwrap.dedent('''
    import mgp

    KEPT = []

    @mgp.read_proc
    def echo(ctx: mgp.ProcCtx, name: str, items: mgp.List[int], opt: mgp.Nullable[mgp.Map] = None,
             flag: bool = False, anything: mgp.Any = "x", ratio: mgp.Number = 0.5,
             maybe: mgp.Nullable[mgp.List[str]] = None
             ) -> mgp.Record(name=str, items=mgp.List[int], opt=mgp.Nullable[mgp.Map], kind=str,
                             anything=mgp.Any):
        KEPT.append(ctx)
        return mgp.Record(name=name, items=list(items), opt=opt, kind=type(items).__name__, anything=anything)

    @mgp.read_proc
    def nodes(ctx: mgp.ProcCtx) -> mgp.Record(node=mgp.Vertex, labels=mgp.List[str], friends=int):
        return [mgp.Record(node=v, labels=[label.name for label in v.labels], friends=len(list(v.out_edges)))
                for v in ctx.graph.vertices]

    @mgp.write_proc
    def add(ctx: mgp.ProcCtx, label: str, fail: bool = False) -> mgp.Record(node=mgp.Vertex):
        vertex = ctx.graph.create_vertex()
        vertex.add_label(label)
        vertex.properties["x"] = 1
        if fail:
            raise ValueError("asked to fail")
        return mgp.Record(node=vertex)

    @mgp.read_proc
    def sneaky_write(ctx: mgp.ProcCtx) -> mgp.Record(ok=bool):
        ctx.graph.create_vertex()
        return mgp.Record(ok=True)

    @mgp.read_proc
    def wrong_type(ctx: mgp.ProcCtx) -> mgp.Record(count=int):
        return mgp.Record(count="three")

    @mgp.read_proc
    def missing_field(ctx: mgp.ProcCtx) -> mgp.Record(a=int, b=int):
        return mgp.Record(a=1)

    @mgp.read_proc
    def no_args() -> mgp.Record(zero=int):
        return mgp.Record(zero=0)

    @mgp.transformation
    def to_query(messages: mgp.Messages) -> mgp.Record(query=str, parameters=mgp.Nullable[mgp.Map]):
        result = []
        for i in range(messages.total_messages()):
            message = messages.message_at(i)
            result.append(mgp.Record(query="CREATE (:M {p: $p, o: $o})",
                                     parameters={"p": message.payload().decode(), "o": message.offset(),
                                                 "kind": type(message.payload()).__name__}))
        return result
''')


@pytest.fixture(scope="module")
def memgraph(tmp_path_factory):
    directory = tmp_path_factory.mktemp("modules")
    (directory / "demo.py").write_text(DEMO)
    with mgp_environment([directory]) as server:
        server.load_all()
        yield server


def test_signatures_print_like_mg_procedures(memgraph):
    rows = {row["name"]: row for row in memgraph.procedures()}
    assert rows["demo.echo"]["signature"] == (
        'demo.echo(name :: STRING, items :: LIST OF INTEGER, opt = Null :: MAP?, flag = false :: BOOLEAN, '
        'anything = "x" :: ANY, ratio = 0.5 :: NUMBER, maybe = Null :: LIST? OF STRING) :: '
        '(anything :: ANY, items :: LIST OF INTEGER, kind :: STRING, name :: STRING, opt :: MAP?)')
    assert rows["demo.add"]["is_write"] and not rows["demo.echo"]["is_write"]
    assert rows["demo.no_args"]["signature"] == "demo.no_args() :: (zero :: INTEGER)"


def test_arguments_are_converted_like_memgraph(memgraph):
    [row] = memgraph.call("demo.echo", "a", [1, 2])
    assert row == {"name": "a", "items": [1, 2], "opt": None, "kind": "tuple", "anything": "x"}
    [row] = memgraph.call("demo.echo", "a", (3,), {"k": [1, {"x": None}]}, True, 7)
    assert row["opt"] == {"k": [1, {"x": None}]} and row["anything"] == 7


@pytest.mark.parametrize("args, message", [
    ((1, [1]), "'demo.echo' argument named 'name' at position 0 must be of type STRING."),
    (("a", [1, "x"]), "'demo.echo' argument named 'items' at position 1 must be of type LIST OF INTEGER."),
    (("a", [True]), "'demo.echo' argument named 'items' at position 1 must be of type LIST OF INTEGER."),
    (("a", [1], "not a map"), "'demo.echo' argument named 'opt' at position 2 must be of type MAP?."),
    (("a", [1], None, 1), "'demo.echo' argument named 'flag' at position 3 must be of type BOOLEAN."),
    (("a", [1], None, False, None), "'demo.echo' argument named 'anything' at position 4 must be of type ANY."),
    (("a", [1], None, False, 1, "x"), "'demo.echo' argument named 'ratio' at position 5 must be of type NUMBER."),
    (("a",), "'demo.echo' requires between 2 and 7 arguments."),
])
def test_wrong_cypher_types_are_rejected_before_the_call(memgraph, args, message):
    with pytest.raises(QueryError) as caught:
        memgraph.call("demo.echo", *args)
    assert str(caught.value) == message


def test_argument_count_messages(memgraph):
    with pytest.raises(QueryError, match=r"^'demo.no_args' requires no arguments.$"):
        memgraph.call("demo.no_args", 1)
    with pytest.raises(QueryError, match=r"^'demo.add' requires between 1 and 2 arguments.$"):
        memgraph.call("demo.add")
    with pytest.raises(QueryError, match=r"^There is no procedure named 'demo.nope'.$"):
        memgraph.call("demo.nope")
    with pytest.raises(QueryError, match="out of range"):
        memgraph.call("demo.echo", "a", [2**63])


def test_graph_reads_and_writes(memgraph):
    [row] = memgraph.call("demo.add", "Person")
    node = row["node"]
    assert isinstance(node, Node) and node.labels == ("Person",) and node.properties == {"x": 1}
    other = memgraph.store.add_vertex(["City"], {"name": "Zagreb"})
    memgraph.store.add_edge(node.id, other, "LIVES_IN")
    rows = {r["node"].id: r for r in memgraph.call("demo.nodes")}
    assert rows[node.id]["friends"] == 1 and rows[other]["labels"] == ["City"]


def test_failed_write_rolls_back_and_reports_the_python_error(memgraph):
    before = len(memgraph.store.vertices)
    with pytest.raises(QueryError) as caught:
        memgraph.call("demo.add", "Person", True)
    assert caught.value.message.startswith("demo.add: Traceback")
    assert caught.value.last_line == "ValueError: asked to fail"
    assert len(memgraph.store.vertices) == before


def test_read_procedures_get_an_immutable_graph(memgraph):
    with pytest.raises(QueryError) as caught:
        memgraph.call("demo.sneaky_write")
    assert "ImmutableObjectError" in caught.value.last_line


def test_records_are_checked_against_the_signature(memgraph):
    with pytest.raises(QueryError) as caught:
        memgraph.call("demo.wrong_type")
    assert "Unable to insert field 'count' with value: 'three'" in caught.value.last_line
    with pytest.raises(QueryError, match="did not yield all fields as required by its signature"):
        memgraph.call("demo.missing_field")


def test_contexts_are_invalid_after_the_call(memgraph):
    memgraph.call("demo.echo", "a", [1])
    kept = memgraph.python_module("demo").KEPT[-1]
    assert not kept.is_valid()


def test_transformations_get_bytearray_payloads(memgraph):
    rows = memgraph.transform("demo.to_query", [{"payload": b"hi", "topic_name": "t", "offset": 4}])
    assert rows == [{"query": "CREATE (:M {p: $p, o: $o})", "parameters": {"p": "hi", "o": 4, "kind": "bytearray"}}]


def test_environment_is_restored(tmp_path):
    before = sys.modules.get("_mgp"), sys.modules.get("mgp")
    (tmp_path / "demo2.py").write_text(DEMO)
    with mgp_environment([tmp_path]) as server:
        server.load_all()
        assert sys.modules["mgp"]._mgp is sys.modules["_mgp"] is not before[0]
        assert "demo2" in sys.modules
    assert (sys.modules.get("_mgp"), sys.modules.get("mgp")) == before
    assert "demo2" not in sys.modules
