"""Transformations: messages, loading (plain Python and `import mgp` files), running."""
from __future__ import annotations

import sys
import textwrap
import uuid

import pytest
from confluent_kafka import Message as KafkaMessage
from paths import ROOT

from stream_registry.errors import TransformError
from stream_registry.graph.transform import (
    QUERY_MODULES_ENV,
    Message,
    Messages,
    Statement,
    load_transformation,
    run_transformation,
)

QUERY_MODULES = ROOT / "query_modules"

MGP_STYLE = """
import mgp

@mgp.transformation
def tr(messages: mgp.Messages) -> mgp.Record(query=str, parameters=mgp.Nullable[mgp.Map]):
    out = []
    for i in range(messages.total_messages()):
        m = messages.message_at(i)
        out.append(mgp.Record(query="CREATE (:M {p: $p, o: $o})",
                              parameters={"p": m.payload().decode(), "o": m.offset()}))
    return out
"""


@pytest.fixture
def modules(tmp_path):
    """Write query-module files with unique names; forget them from sys.modules afterwards."""
    written: list[str] = []

    def write(source: str, name: str | None = None, subdir: str = "") -> str:
        name = name or f"qm_{uuid.uuid4().hex[:8]}"
        folder = tmp_path / subdir
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.py").write_text(textwrap.dedent(source))
        written.append(name)
        return name

    write.dir = str(tmp_path)
    yield write
    for name in written + ["transfers"]:
        sys.modules.pop(name, None)


def batch(*payloads: bytes, topic: str = "t", partition: int = 0, first_offset: int = 10) -> list[Message]:
    return [Message(topic, partition, first_offset + i, None, p, 1_700_000_000_000 + i)
            for i, p in enumerate(payloads)]


# -- messages -----------------------------------------------------------------
def test_message_has_memgraphs_accessors_and_partition():
    m = Message("orders", 3, 42, b"k", b"{}", 1234)
    assert (m.topic_name(), m.partition(), m.offset(), m.key(), m.payload(), m.timestamp()) == \
        ("orders", 3, 42, b"k", b"{}", 1234)
    assert Message("t", 0, 0, None, None, 0).payload() == b""      # tombstone: empty payload, as Memgraph
    with pytest.raises(AttributeError):
        m.extra = 1                                                 # slots: no stray attributes


def test_message_from_kafka_reads_through_and_equals_a_copy():
    raw = KafkaMessage(topic="orders", partition=2, offset=7, key=b"k", value=b"v", timestamp=(1, 99))
    m = Message.from_kafka(raw)
    assert isinstance(m, Message)
    assert (m.topic_name(), m.partition(), m.offset(), m.key(), m.payload(), m.timestamp()) == \
        ("orders", 2, 7, b"k", b"v", 99)
    assert m == Message("orders", 2, 7, b"k", b"v", 99)
    assert Message.from_kafka(KafkaMessage(topic="t", value=None, timestamp=(0, -1))).payload() == b""


def test_a_kafka_batch_runs_as_the_worker_wraps_it():
    raw = [KafkaMessage(topic="t", partition=1, offset=i, value=b"v%d" % i, timestamp=(1, i)) for i in range(3)]
    msgs = [Message.from_kafka(m) for m in raw]                 # what the stream worker and the bench pass
    assert msgs[2] == Message("t", 1, 2, None, b"v2", 2)
    assert [m.payload() for m in Messages(msgs)] == [b"v0", b"v1", b"v2"]
    statements = run_transformation(lambda ms: [{"query": "RETURN $o", "parameters": {"o": m.offset()}}
                                                for m in ms], msgs)
    assert [s.parameters["o"] for s in statements] == [0, 1, 2]
    with pytest.raises(TransformError, match="t:1 offset 0"):
        run_transformation(lambda ms: 1 / 0, msgs)


def test_messages_wraps_a_sequence():
    msgs = Messages(batch(b"a", b"b"))
    assert msgs.total_messages() == len(msgs) == 2
    assert msgs.message_at(1).payload() == b"b"
    assert [m.offset() for m in msgs] == [10, 11]


def test_statement_is_a_frozen_value_with_empty_default_parameters():
    s = Statement("RETURN 1")
    assert s.parameters == {}
    with pytest.raises(AttributeError):
        s.query = "x"


# -- loading ------------------------------------------------------------------
def test_loads_a_plain_python_transformation_from_search_dirs(modules):
    name = modules("""
        def fn(messages):
            return [{"query": "RETURN $x", "parameters": {"x": m.offset()}} for m in messages]
    """)
    fn = load_transformation(f"{name}.fn", search_dirs=[modules.dir])
    assert run_transformation(fn, batch(b"a")) == [Statement("RETURN $x", {"x": 10})]
    assert load_transformation(f"{name}.fn") is fn                  # now importable: same module


@pytest.mark.parametrize("separator", [":", ","])
def test_query_modules_dir_env_var_is_searched(modules, monkeypatch, separator):
    name = modules("def fn(messages):\n    return []\n")
    monkeypatch.setenv(QUERY_MODULES_ENV, separator.join(["/nonexistent", modules.dir]))
    assert run_transformation(load_transformation(f"{name}.fn"), batch(b"a")) == []


def test_dotted_module_paths_import_normally_or_from_subdirectories(modules):
    assert callable(load_transformation("stream_registry.builtin_transformations.merge_messages"))
    package = f"pkg_{uuid.uuid4().hex[:8]}"
    modules("def fn(messages):\n    return []\n", name="mod", subdir=package)
    try:
        assert callable(load_transformation(f"{package}.mod.fn", search_dirs=[modules.dir]))
    finally:
        sys.modules.pop(f"{package}.mod", None)


@pytest.mark.parametrize("path", ["", "nodot", "a..b", "1a.b", "a.b-c", None, "a.b c"])
def test_malformed_paths_are_rejected(path):
    with pytest.raises(TransformError, match="module.function"):
        load_transformation(path)


def test_missing_module_names_the_path_and_the_directories(tmp_path):
    with pytest.raises(TransformError) as err:
        load_transformation("no_such_module_xyz.fn", search_dirs=[str(tmp_path)])
    assert "no_such_module_xyz.fn" in str(err.value) and str(tmp_path) in str(err.value)


def test_missing_or_uncallable_function_names_both(modules):
    name = modules("NOT_A_FUNCTION = 3\n")
    with pytest.raises(TransformError, match=rf"{name}\.nope.*no function 'nope'"):
        load_transformation(f"{name}.nope", search_dirs=[modules.dir])
    with pytest.raises(TransformError, match=r"NOT_A_FUNCTION.*int, not a function"):
        load_transformation(f"{name}.NOT_A_FUNCTION", search_dirs=[modules.dir])


def test_module_raising_at_import_is_wrapped_and_not_left_half_loaded(modules):
    name = modules("raise RuntimeError('boom at import')\n")
    with pytest.raises(TransformError, match=rf"{name}\.fn.*RuntimeError: boom at import"):
        load_transformation(f"{name}.fn", search_dirs=[modules.dir])
    assert name not in sys.modules
    broken = modules("import definitely_not_installed_pkg\n")
    with pytest.raises(TransformError, match="definitely_not_installed_pkg"):
        load_transformation(f"{broken}.fn", search_dirs=[modules.dir])
    exits = modules("import sys\nsys.exit(3)\n")
    with pytest.raises(TransformError, match="SystemExit: 3"):
        load_transformation(f"{exits}.fn", search_dirs=[modules.dir])
    syntax = modules("def fn(:\n")
    with pytest.raises(TransformError, match="SyntaxError"):
        load_transformation(f"{syntax}.fn", search_dirs=[modules.dir])


def test_context_taking_transformation_gets_none_for_context(modules):
    name = modules("""
        def fn(ctx, messages):
            return [{"query": "RETURN $c", "parameters": {"c": repr(ctx)}}]
    """)
    fn = load_transformation(f"{name}.fn", search_dirs=[modules.dir])
    assert run_transformation(fn, batch(b"a"))[0].parameters == {"c": "None"}


def test_wrappers_made_by_mgp_are_peeled_but_user_wrappers_kept(modules):
    from stream_registry.graph.transform.loader import _unwrap_mgp

    def original(messages):
        return []

    namespace = {"functools": __import__("functools"), "original": original}
    exec(compile("@functools.wraps(original)\ndef wrapper(graph, messages):\n    return original(messages)\n",
                 "/somewhere/mgp.py", "exec"), namespace)
    assert _unwrap_mgp(namespace["wrapper"]) is original
    exec(compile("@functools.wraps(original)\ndef mine(messages):\n    return original(messages)\n",
                 "/somewhere/user.py", "exec"), namespace)
    assert _unwrap_mgp(namespace["mine"]) is namespace["mine"]


# -- `import mgp` files outside Memgraph ------------------------------------------
def test_mgp_file_loads_over_the_pypi_stub_which_is_left_untouched(modules):
    import mgp
    stub_module = mgp._mgp._MODULE
    name = modules(MGP_STYLE)
    fn = load_transformation(f"{name}.tr", search_dirs=[modules.dir])
    assert run_transformation(fn, batch(b"hi")) == [Statement("CREATE (:M {p: $p, o: $o})", {"p": "hi", "o": 10})]
    assert mgp._mgp._MODULE is stub_module


@pytest.mark.parametrize("state", ["missing", "none"])
def test_mgp_file_loads_when_nothing_can_register_and_the_slot_is_restored(modules, monkeypatch, state):
    import mgp
    if state == "missing":
        monkeypatch.delattr(mgp._mgp, "_MODULE")
    else:
        monkeypatch.setattr(mgp._mgp, "_MODULE", None)               # as in Memgraph between imports
    name = modules(MGP_STYLE)
    fn = load_transformation(f"{name}.tr", search_dirs=[modules.dir])
    assert run_transformation(fn, batch(b"x"))[0].parameters == {"p": "x", "o": 10}
    if state == "missing":
        assert not hasattr(mgp._mgp, "_MODULE")
    else:
        assert mgp._mgp._MODULE is None


def test_a_registering_mgp_module_slot_is_used_not_replaced(modules, monkeypatch):
    import mgp

    class Registering:
        def __init__(self):
            self.added = []

        def add_transformation(self, wrapper):
            self.added.append(wrapper)

    real = Registering()
    monkeypatch.setattr(mgp._mgp, "_MODULE", real)
    name = modules(MGP_STYLE)
    fn = load_transformation(f"{name}.tr", search_dirs=[modules.dir])
    assert mgp._mgp._MODULE is real and len(real.added) == 1
    assert real.added[0].__wrapped__ is fn


def test_mgp_file_loads_on_the_test_backend_and_leaves_its_module_slot_none(modules):
    from mgp_backend import mgp_environment

    name = modules(MGP_STYLE)
    with mgp_environment() as server:
        fn = load_transformation(f"{name}.tr", search_dirs=[modules.dir])
        assert server.mgp._mgp._MODULE is None
        assert run_transformation(fn, batch(b"z"))[0].parameters == {"p": "z", "o": 10}


# -- running --------------------------------------------------------------------
def test_records_may_be_mgp_records_mappings_or_statements():
    import mgp

    def fn(messages):
        return [mgp.Record(query="A", parameters=None), {"query": "B"}, {"query": "C", "parameters": {"x": 1}},
                Statement("D", {"y": 2})]

    assert run_transformation(fn, batch(b"a")) == [Statement("A"), Statement("B"), Statement("C", {"x": 1}),
                                                  Statement("D", {"y": 2})]
    assert run_transformation(lambda m: (r for r in [{"query": "G"}]), batch()) == [Statement("G")]
    assert run_transformation(lambda m: {"query": "single"}, batch()) == [Statement("single")]


@pytest.mark.parametrize("result, message", [
    ([{"query": "A"}, 42], r"record 1 is a int"),
    ([{"query": "A"}, {"parameters": {}}], r"record 1: query must be a non-empty string"),
    ([{"query": "A", "parameters": [1]}], r"record 0: parameters must be a map or null, got list"),
    (None, r"returned NoneType"),
    ("RETURN 1", r"returned str"),
])
def test_bad_records_name_the_index_and_type(result, message):
    with pytest.raises(TransformError, match=message) as err:
        run_transformation(lambda m: result, batch(b"a", topic="orders", partition=4))
    assert "orders:4 offset 10" in str(err.value)


def test_an_exception_inside_names_transformation_exception_and_batch_start():
    def exploding(messages):
        raise KeyError("amount")

    with pytest.raises(TransformError) as err:
        run_transformation(exploding, batch(b"a", topic="orders", partition=4, first_offset=77))
    text = str(err.value)
    assert "exploding" in text and "KeyError" in text and "'amount'" in text and "orders:4 offset 77" in text
    with pytest.raises(TransformError, match="my.name"):
        run_transformation(exploding, batch(b"a"), name="my.name")


# -- the demo and the built-ins -------------------------------------------------------
TRANSFER = (b'{"transfer_id": "t-1", "from": "acc-1", "to": "acc-2", "amount": 12.5, '
            b'"currency": "EUR", "ts": "2026-11-22T10:00:00Z"}')


def test_transfers_loads_from_the_query_modules_directory(modules):
    fn = load_transformation("transfers.transfer", search_dirs=[str(QUERY_MODULES)])
    [statement] = run_transformation(fn, batch(TRANSFER, topic="transfers", partition=1))
    assert statement.query.startswith("MERGE (src:Account {id: $from_account})")
    assert "MERGE (src)-[t:TRANSFER {transfer_id: $transfer_id}]->(dst)" in statement.query
    assert statement.parameters == {
        "transfer_id": "t-1", "from_account": "acc-1", "to_account": "acc-2", "amount": 12.5,
        "currency": "EUR", "ts": "2026-11-22T10:00:00Z",
        "kafka_topic": "transfers", "kafka_partition": 1, "kafka_offset": 10}
    with pytest.raises(TransformError, match=r"transfers offset 11.*lacks amount"):
        run_transformation(fn, batch(TRANSFER, b'{"transfer_id": "t-2", "from": "a", "to": "b", '
                                               b'"currency": "EUR", "ts": "x"}', topic="transfers"))


def test_transfers_runs_as_memgraph_runs_it(modules):
    from mgp_backend import mgp_environment

    with mgp_environment([QUERY_MODULES]) as server:
        server.load_module(QUERY_MODULES / "transfers.py")
        rows = server.transform("transfers.transfer", [
            {"payload": TRANSFER, "topic_name": "transfers", "key": None, "timestamp": 1, "offset": 5}])
    assert len(rows) == 1
    assert rows[0]["parameters"]["transfer_id"] == "t-1" and rows[0]["parameters"]["kafka_offset"] == 5


def test_builtin_transformations_by_dotted_path():
    base = "stream_registry.builtin_transformations"
    msgs = batch(b'{"a": 1}', b'{"b": [2]}', topic="ev", partition=2)
    merged = run_transformation(load_transformation(f"{base}.merge_messages"), msgs)
    assert [s.parameters["offset"] for s in merged] == [10, 11] and merged[0].query.startswith("MERGE")
    assert merged[0].parameters == {"topic": "ev", "partition": 2, "offset": 10, "payload": '{"a": 1}',
                                    "key": None, "timestamp": 1_700_000_000_000}
    [unwind] = run_transformation(load_transformation(f"{base}.merge_messages_batched"), msgs)
    assert unwind.query.startswith("UNWIND $rows") and len(unwind.parameters["rows"]) == 2
    assert run_transformation(load_transformation(f"{base}.merge_messages_batched"), []) == []
    created = run_transformation(load_transformation(f"{base}.create_messages"), msgs)
    assert created[0].query.startswith("CREATE")
    nodes = run_transformation(load_transformation(f"{base}.json_nodes"), msgs)
    assert nodes[1].parameters == {"topic": "ev", "partition": 2, "offset": 11, "properties": {"b": [2]}}
    with pytest.raises(TransformError, match=r"ev:2 offset 10 is a JSON list"):
        run_transformation(load_transformation(f"{base}.json_nodes"), batch(b"[1]", topic="ev", partition=2))
