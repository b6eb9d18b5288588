"""Contract tests of `query_modules/streams.py` on Memgraph's real mgp.py.

The module is loaded the way Memgraph loads it (tests/mgp_backend), procedures
are CALLed through mgp's own wrappers with Cypher-typed arguments, and the
records come back as a client sees them. The scenarios of Memgraph's own
stream offset test (tests/e2e/streams: set to 10, -1, -2, unknown stream) run
here on multi-partition topics of the embedded Kafka cluster.
"""
from __future__ import annotations

import datetime
import uuid
from pathlib import Path

import pytest

from mgp_backend import QueryError, mgp_environment
from stream_helpers import by_partition, delivered_from_file, wait_until
from stream_registry.registry.registry import reset_default_registry

ROOT = Path(__file__).resolve().parent.parent
TRANSFORM = "stream_registry.builtin_transformations.merge_messages"

SIGNATURES = {
    "streams.create": (
        'streams.create(name :: STRING, topics :: LIST OF STRING, bootstrap_servers :: STRING, '
        'transform = "" :: STRING, sink = "bolt://localhost:7687" :: STRING, consumer_group = "" :: STRING, '
        'batch_size = 1000 :: INTEGER, batch_interval_ms = 100 :: INTEGER, configs = {} :: MAP, '
        'credentials = {} :: MAP) :: (name :: STRING, status :: STRING)'),
    "streams.start": "streams.start(name :: STRING) :: (name :: STRING, status :: STRING)",
    "streams.stop": "streams.stop(name :: STRING) :: (name :: STRING, status :: STRING)",
    "streams.drop": "streams.drop(name :: STRING) :: (name :: STRING, status :: STRING)",
    "streams.list": (
        "streams.list() :: (bootstrap_servers :: STRING, configs :: MAP, consumer_group :: STRING, "
        "credentials :: MAP, error :: STRING?, name :: STRING, sink :: STRING, status :: STRING, "
        "topics :: LIST OF STRING, transform :: STRING)"),
    "streams.set_stream_offset": (
        "streams.set_stream_offset(name :: STRING, offset :: ANY, timeout_ms = 10000 :: INTEGER, "
        "dry_run = false :: BOOLEAN) :: (message :: STRING, offset :: INTEGER?, partition :: INTEGER, "
        "previous_offset :: INTEGER?, status :: STRING, topic :: STRING)"),
    "streams.offsets": (
        "streams.offsets(name :: STRING) :: (assigned :: BOOLEAN, committed_offset :: INTEGER?, "
        "lag :: INTEGER?, log_end_offset :: INTEGER, log_start_offset :: INTEGER, partition :: INTEGER, "
        "position :: INTEGER?, topic :: STRING)"),
    "streams.history": (
        "streams.history(name :: STRING) :: (changed_at :: LOCAL_DATE_TIME, offset :: INTEGER, "
        "partition :: INTEGER, previous_offset :: INTEGER?, status :: STRING, topic :: STRING)"),
}


@pytest.fixture(scope="module")
def memgraph():
    with mgp_environment([ROOT / "query_modules"]) as server:
        server.load_all()
        yield server


@pytest.fixture
def state(tmp_path, monkeypatch):
    """A fresh process-wide registry on a state directory of this test."""
    monkeypatch.setenv("MGSTREAMS_STATE_DIR", str(tmp_path / "state"))
    reset_default_registry()
    yield tmp_path
    reset_default_registry()


@pytest.fixture(scope="module")
def quick_rebalance(kafka):
    """Stop/start cycles rejoin an empty group: keep the broker's initial delay short here."""
    if kafka.embedded is not None:
        kafka.embedded.set_initial_rebalance_delay(200)
    yield
    if kafka.embedded is not None:
        kafka.embedded.set_initial_rebalance_delay(3000)


def create(memgraph, name, topic, bootstrap, out: Path, **options):
    # A group of its own: on the embedded cluster a group whose member stopped takes ~44 s to rebalance.
    group = f"qm_{name}_{uuid.uuid4().hex[:8]}"
    defaults = {"transform": TRANSFORM, "sink": f"cypherl://{out}", "consumer_group": group, "batch_size": 100,
                "batch_interval_ms": 50, "configs": {}, "credentials": {}}
    defaults.update(options)
    return memgraph.call("streams.create", name, [topic], bootstrap, *defaults.values())


def error_of(memgraph, procedure, *args) -> QueryError:
    with pytest.raises(QueryError) as caught:
        memgraph.call(procedure, *args)
    return caught.value


# -- signatures ---------------------------------------------------------------------
def test_every_procedure_registers_with_its_signature(memgraph):
    rows = {row["name"]: row for row in memgraph.procedures() if row["name"].startswith("streams.")}
    assert {name: row["signature"] for name, row in rows.items()} == SIGNATURES
    assert not any(row["is_write"] for row in rows.values()), "they never write the graph themselves"


def test_every_procedure_has_a_docstring(memgraph):
    module = memgraph.python_module("streams")
    for name in SIGNATURES:
        proc = memgraph.procedure(name)
        assert (proc.callback.__doc__ or "").strip(), f"{name} has no docstring"
    assert module.__doc__


# -- wrong Cypher types: rejected by the server before the module runs ---------------------
@pytest.mark.parametrize("procedure, args, message", [
    ("streams.create", ("s", "topic", "localhost:9092"),
     "'streams.create' argument named 'topics' at position 1 must be of type LIST OF STRING."),
    ("streams.create", ("s", ["t"], "localhost:9092", "", "cypherl:///tmp/x", "", "100"),
     "'streams.create' argument named 'batch_size' at position 6 must be of type INTEGER."),
    ("streams.create", ("s", ["t"], "localhost:9092", "", "cypherl:///tmp/x", "", 1, 1, ["a"]),
     "'streams.create' argument named 'configs' at position 8 must be of type MAP."),
    ("streams.start", (1,), "'streams.start' argument named 'name' at position 0 must be of type STRING."),
    ("streams.set_stream_offset", ("s", None),
     "'streams.set_stream_offset' argument named 'offset' at position 1 must be of type ANY."),
    ("streams.set_stream_offset", ("s", 10, 1.5),
     "'streams.set_stream_offset' argument named 'timeout_ms' at position 2 must be of type INTEGER."),
    ("streams.set_stream_offset", ("s", 10, 100, "yes"),
     "'streams.set_stream_offset' argument named 'dry_run' at position 3 must be of type BOOLEAN."),
    ("streams.list", ("s",), "'streams.list' requires no arguments."),
    ("streams.offsets", (), "'streams.offsets' requires exactly 1 argument."),
    ("streams.create", ("s", ["t"]), "'streams.create' requires between 3 and 10 arguments."),
])
def test_wrong_cypher_types_give_clear_errors(memgraph, procedure, args, message):
    assert str(error_of(memgraph, procedure, *args)) == message


# -- failures inside the module: one clear line -----------------------------------------------
def test_validation_failures_name_the_field_and_value(memgraph, state):
    error = error_of(memgraph, "streams.create", "bad name", ["t"], "localhost:9092")
    assert error.last_line.startswith("Exception: name: 'bad name' is not a valid stream name")
    assert error.message.startswith("streams.create: ")
    error = error_of(memgraph, "streams.create", "s", ["t"], "no-port")
    assert error.last_line == "Exception: bootstrap_servers: 'no-port' is not host:port"
    error = error_of(memgraph, "streams.create", "s", ["t"], "localhost:9092", "", "ftp://x")
    assert error.last_line.startswith("Exception: ") and "sink" in error.last_line
    error = error_of(memgraph, "streams.create", "s", ["t"], "localhost:9092", "", "cypherl:///tmp/x", "", 0)
    assert error.last_line == "Exception: batch_size: must be a positive integer, got 0"


def test_unknown_stream_is_an_error_everywhere(memgraph, state):
    for procedure in ("streams.start", "streams.stop", "streams.drop", "streams.offsets", "streams.history"):
        error = error_of(memgraph, procedure, "foo")
        assert error.last_line == "Exception: name: no stream named 'foo'", procedure
    error = error_of(memgraph, "streams.set_stream_offset", "foo", 10)
    assert error.last_line == "Exception: name: no stream named 'foo'"
    assert memgraph.call("streams.list") == []


def test_offset_and_timeout_are_validated(memgraph, state):
    error = error_of(memgraph, "streams.set_stream_offset", "foo", "next tuesday")
    assert error.last_line.startswith("Exception: offset: cannot parse 'next tuesday'")
    error = error_of(memgraph, "streams.set_stream_offset", "foo", -3)
    assert error.last_line.startswith("Exception: offset: invalid offset -3")
    error = error_of(memgraph, "streams.set_stream_offset", "foo", {"t:x": 1})
    assert "map key 't:x'" in error.last_line
    error = error_of(memgraph, "streams.set_stream_offset", "foo", 10, 0)
    assert error.last_line == "Exception: timeout_ms: must be a positive number of milliseconds, got 0"


def test_a_node_is_not_a_configs_map(memgraph, state):
    vertex = memgraph.vertex(memgraph.store.add_vertex(["Config"], {"x": 1}))
    error = error_of(memgraph, "streams.create", "s", ["t"], "localhost:9092", "", "cypherl:///tmp/x", "", 1, 1,
                     vertex)
    assert error.last_line == "Exception: configs: expected a map, got Vertex"


def test_internal_errors_are_reported_not_raised_through(memgraph, state, monkeypatch):
    import stream_registry.registry.registry as registry_module

    def broken():
        raise KeyError("boom")

    monkeypatch.setattr(memgraph.python_module("streams"), "default_registry", broken)
    error = error_of(memgraph, "streams.list")
    assert error.last_line == "Exception: internal error: KeyError: 'boom'"
    assert registry_module.default_registry is not broken


# -- on Kafka ---------------------------------------------------------------------------------
def test_create_list_drop_and_masked_credentials(memgraph, state, kafka):
    topic = kafka.new_topic(partitions=2)
    secret = "S3cr3tP4ssw0rd"
    out = state / "out.cypherl"
    [row] = create(memgraph, "orders", topic, kafka.bootstrap_servers, out,
                   consumer_group="", configs={"client.id": "mg", "sasl.password": secret},
                   credentials={"sasl.username": "michael"})
    assert row == {"name": "orders", "status": "created"}
    [listed] = memgraph.call("streams.list")
    assert listed["name"] == "orders" and listed["topics"] == [topic] and listed["status"] == "created"
    assert listed["consumer_group"] == "mgstreams_orders" and listed["transform"] == TRANSFORM
    assert listed["sink"] == f"cypherl://{out}" and listed["error"] is None
    assert listed["configs"]["client.id"] == "mg"
    assert secret not in repr(listed) and "michael" not in repr(listed)
    assert set(listed["credentials"]) == {"sasl.username"}
    duplicate = error_of(memgraph, "streams.create", "orders", [topic], kafka.bootstrap_servers, TRANSFORM,
                         f"cypherl://{out}")
    assert duplicate.last_line == "Exception: name: a stream named 'orders' already exists"
    assert memgraph.call("streams.drop", "orders") == [{"name": "orders", "status": "created"}]
    assert memgraph.call("streams.list") == []


def test_defaults_give_a_working_stream(memgraph, state, kafka):
    """transform "" stores messages as :KafkaMessage nodes; consumer_group "" is mgstreams_<name>."""
    topic = kafka.new_topic(partitions=1)
    memgraph.call("streams.create", "plain", [topic], kafka.bootstrap_servers)
    [listed] = memgraph.call("streams.list")
    assert listed["transform"] == TRANSFORM and listed["sink"] == "bolt://localhost:7687"
    assert listed["consumer_group"] == "mgstreams_plain"


def test_unknown_topic_is_rejected_at_create(memgraph, state, kafka):
    error = error_of(memgraph, "streams.create", "s", ["no_such_topic_x1"], kafka.bootstrap_servers, TRANSFORM,
                     f"cypherl://{state / 'out.cypherl'}")
    assert "no_such_topic_x1" in error.last_line
    assert memgraph.call("streams.list") == []


def _delivered(out: Path, since: int = 0) -> dict[tuple[str, int], list[int]]:
    return by_partition(delivered_from_file(out)[since:])


def _wait_for(out: Path, since: int, last: dict[tuple[str, int], int]) -> dict:
    wait_until(lambda: all(offset in _delivered(out, since).get(tp, []) for tp, offset in last.items()),
               timeout=20, what=f"offsets {last}")
    return _delivered(out, since)


def test_memgraph_set_offset_scenarios_on_three_partitions(memgraph, state, kafka, quick_rebalance):
    """Memgraph's e2e `test_set_offset` (10, then -1 = beginning, then -2 = end) on every partition.

    Memgraph stops the stream around each call; here the stream starts once and
    the later offsets are set while it runs (a stop/start cycle in one group
    waits out the embedded cluster's ~44 s member expiry; tests of restarts
    live with the registry's). Setting before the first start is the stopped case.
    """
    topic = kafka.new_topic(partitions=3)
    kafka.produce(topic, 60, partitions=3)                     # offsets 0..19 on each partition
    out = state / "out.cypherl"
    create(memgraph, "test", topic, kafka.bootstrap_servers, out, batch_size=1)
    partitions = [(topic, p) for p in range(3)]

    assert error_of(memgraph, "streams.set_stream_offset", "foo", 10).last_line == \
        "Exception: name: no stream named 'foo'"

    changes = memgraph.call("streams.set_stream_offset", "test", 10)
    assert sorted((c["topic"], c["partition"], c["offset"], c["status"]) for c in changes) == \
        [(t, p, 10, "pending") for t, p in partitions]
    assert all(c["previous_offset"] is None for c in changes)   # nothing committed yet
    [started] = memgraph.call("streams.start", "test")
    assert started["status"] in ("starting", "running")
    got = _wait_for(out, 0, {tp: 19 for tp in partitions})
    assert got == {tp: list(range(10, 20)) for tp in partitions}

    since = len(delivered_from_file(out))
    changes = memgraph.call("streams.set_stream_offset", "test", -1)
    assert {(c["offset"], c["previous_offset"], c["status"]) for c in changes} == {(0, 20, "applied")}
    got = _wait_for(out, since, {tp: 19 for tp in partitions})
    assert got == {tp: list(range(0, 20)) for tp in partitions}

    since = len(delivered_from_file(out))
    changes = memgraph.call("streams.set_stream_offset", "test", -2)
    assert {(c["offset"], c["status"]) for c in changes} == {(20, "applied")}
    kafka.produce(topic, 3, partitions=3)                      # the "Final Message" on each partition
    got = _wait_for(out, since, {tp: 20 for tp in partitions})
    assert got == {tp: [20] for tp in partitions}, "nothing before the end is replayed"
    assert memgraph.call("streams.stop", "test") == [{"name": "test", "status": "stopped"}]

    rows = memgraph.call("streams.offsets", "test")
    assert sorted((r["partition"], r["committed_offset"], r["log_start_offset"], r["log_end_offset"], r["lag"],
                   r["assigned"], r["topic"]) for r in rows) == [(p, 21, 0, 21, 0, False, topic) for p in range(3)]

    history = memgraph.call("streams.history", "test")
    assert sorted((h["offset"], h["partition"], h["status"]) for h in history) == \
        sorted((o, p, "applied") for o in (10, 0, 20) for p in range(3))
    assert {(h["offset"], h["previous_offset"]) for h in history if h["offset"] != 10} == {(0, 20), (20, 20)}
    assert all(isinstance(h["changed_at"], datetime.datetime) and h["changed_at"].tzinfo is None for h in history)
    assert [h["changed_at"] for h in history] == sorted((h["changed_at"] for h in history), reverse=True)


def test_set_offset_while_running_applies_on_the_assigned_partitions(memgraph, state, kafka, quick_rebalance):
    topic = kafka.new_topic(partitions=3)
    kafka.produce(topic, 30, partitions=3)                     # offsets 0..9 on each partition
    out = state / "out.cypherl"
    create(memgraph, "live", topic, kafka.bootstrap_servers, out)
    memgraph.call("streams.start", "live")
    wait_until(lambda: len(delivered_from_file(out)) >= 30, timeout=20, what="the first 30 messages")
    [listed] = memgraph.call("streams.list")
    assert listed["status"] == "running"

    planned = memgraph.call("streams.set_stream_offset", "live", {f"{topic}:0": 5}, 10000, True)
    assert [(c["partition"], c["previous_offset"], c["offset"], c["status"]) for c in planned] == \
        [(0, 10, 5, "planned")]
    since = len(delivered_from_file(out))
    changes = memgraph.call("streams.set_stream_offset", "live", {f"{topic}:0": 5}, 5000)
    assert [(c["partition"], c["previous_offset"], c["offset"], c["status"]) for c in changes] == \
        [(0, 10, 5, "applied")]
    wait_until(lambda: 9 in _delivered(out, since).get((topic, 0), []), timeout=20, what="the replay")
    assert _delivered(out, since) == {(topic, 0): list(range(5, 10))}

    clamped = memgraph.call("streams.set_stream_offset", "live", {topic: 1000})
    assert {(c["offset"], c["status"]) for c in clamped} == {(10, "clamped")}
    assert all("clamped" in c["message"] for c in clamped)
    memgraph.call("streams.drop", "live")
