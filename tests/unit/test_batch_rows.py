"""A batch as the stream process hands it to a transformation (Messages over consumed confluent-kafka messages)
and the statements it comes back as (Statements: runs of one query with their rows).

What a transformation reads costs only what it reads; the built-in transformations build one query's rows per
batch; and whichever way a batch is built, the statements mean the same: the same list, the same cypherl lines.
"""
from __future__ import annotations

from confluent_kafka import Message as KafkaMessage
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_registry.builtin_transformations import create_messages, json_nodes, merge_messages
from stream_registry.graph.cypher_literals import render_statement
from stream_registry.graph.sinks.cypherl import CypherlSink
from stream_registry.graph.statement import Statement, Statements
from stream_registry.graph.transform import Message, Messages, run_transformation, wrap


class _Counted:
    """A consumed message (confluent-kafka's own Message) whose accessor calls are counted."""

    def __init__(self, message: KafkaMessage, calls: dict[str, int]):
        self._message, self._calls = message, calls

    def __getattr__(self, name: str):
        read = getattr(self._message, name)

        def counted(*args):
            self._calls[name] = self._calls.get(name, 0) + 1
            return read(*args)
        return counted


def _consumed(payloads: list[bytes | None], keys: list[bytes | None] | None = None) -> list[KafkaMessage]:
    keys = keys or [None] * len(payloads)
    return [KafkaMessage(topic="orders", partition=i % 3, offset=100 + i, key=key, value=payload,
                         timestamp=(1, 1_700_000_000_000 + i)) for i, (payload, key) in enumerate(zip(payloads, keys,
                                                                                                    strict=True))]


def test_a_transformation_reading_only_payloads_reads_nothing_else():
    calls: dict[str, int] = {}
    batch = Messages.of_kafka([_Counted(m, calls) for m in _consumed([b"a", b"b", None])])

    def payloads_only(messages):
        return [{"query": "CREATE (:P {v: $v})", "parameters": {"v": m.payload()}} for m in messages]
    statements = run_transformation(payloads_only, batch)
    assert [s.parameters["v"] for s in statements] == [b"a", b"b", b""]
    assert calls == {"value": 3}, "no topic, key, offset or timestamp read, nothing decoded"


def test_the_built_in_transformations_read_the_consumed_messages_once_each():
    calls: dict[str, int] = {}
    consumed = [_Counted(m, calls) for m in _consumed([b'{"a": 1}'] * 4)]
    statements = merge_messages(Messages.of_kafka(consumed))
    assert isinstance(statements, Statements) and len(statements.runs) == 1, "one query's rows, not 4 objects"
    assert calls == dict.fromkeys(("topic", "partition", "offset", "value", "key", "timestamp"), 4)


_PAYLOADS = st.lists(st.one_of(st.none(), st.binary(max_size=8), st.sampled_from([b'{"x": 1}', b"\xff\xfe", b"[]"])),
                     max_size=8)


@settings(max_examples=150, deadline=None)
@given(payloads=_PAYLOADS, keys=st.data())
def test_a_batch_of_consumed_messages_means_what_the_wrapped_messages_meant(payloads, keys):
    """merge_messages and create_messages read the consumed messages directly; json_nodes too, failing on the
    same message with the same error: the statements equal those of the one-wrapper-per-message batch."""
    keyed = keys.draw(st.lists(st.one_of(st.none(), st.binary(max_size=4)), min_size=len(payloads),
                               max_size=len(payloads)))
    consumed = _consumed(payloads, keyed)
    for transformation in (merge_messages, create_messages, json_nodes):
        assert _outcome(transformation, Messages.of_kafka(consumed)) == \
            _outcome(transformation, [wrap(m) for m in consumed]) == \
            _outcome(transformation, [Message(m.topic(), m.partition(), m.offset(), m.key(), m.value(),
                                              m.timestamp()[1]) for m in consumed])


def _outcome(transformation, messages):
    try:
        return [(s.query, dict(s.parameters)) for s in run_transformation(transformation, messages)]
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def test_statements_are_the_list_of_statements_they_hold(tmp_path):
    a, b = "CREATE (:A {v: $v})", "MERGE (:B {v: $v})"
    pairs = [(a, {"v": 1}), (a, {"v": 2}), (b, {"v": 3}), (a, {"v": 4})]
    statements = Statements.of_pairs(pairs)
    listed = [Statement(q, p) for q, p in pairs]
    assert [run[0] for run in statements.runs] == [a, b, a] and len(statements) == 4
    assert statements == listed and list(statements) == listed and list(reversed(statements)) == listed[::-1]
    assert [statements[i] for i in range(-4, 4)] == listed + listed
    assert statements[1:3] == listed[1:3]
    assert statements + [Statement(b, {"v": 5})] == listed + [Statement(b, {"v": 5})]
    assert [Statement(b, {"v": 0})] + statements == [Statement(b, {"v": 0})] + listed
    assert statements[2]["query"] == b and statements[2]["parameters"] == {"v": 3}, "read as a record too"
    assert Statements() == [] and not Statements.of_rows(a, [])
    sink = CypherlSink(str(tmp_path / "out.cypherl"))
    try:   # written as each statement alone: one line each, in order
        assert sink._render(statements).decode().splitlines() == [render_statement(s.query, s.parameters)
                                                                   for s in listed]
    finally:
        sink.close()
