"""Change marks an exactly-once sink stores beside its offsets (issue 42): signed as the commit metadata's, read
back from a cypherl file only when they are this stream's, for this partition."""
from __future__ import annotations

from stream_registry.graph.offset_store import (
    CHANGE_QUERY,
    MARK_LINE,
    change_as_one_statement,
    mark_statements,
    offset_statements,
)
from stream_registry.graph.sinks.cypherl import CypherlSink
from stream_registry.graph.statement import Statement
from stream_registry.model import PartitionKey
from stream_registry.registry.stream.change_marks import ChangeMark, MarkKey

P0, P1 = PartitionKey("t", 0), PartitionKey("t", 1)


def test_a_stored_mark_is_believed_only_by_its_stream_for_its_partition():
    key, other = MarkKey.new(), MarkKey.new()
    mark = ChangeMark(7, 10, 20)
    text = key.encode_stored(P0, mark)
    assert key.decode_stored(P0, text) == mark
    assert key.decode_stored(P0, key.encode_stored(P0, ChangeMark(1, 0))) == ChangeMark(1, 0)   # no previous
    assert key.decode_stored(P1, text) is None, "copied to another partition"
    assert other.decode_stored(P0, text) is None, "another stream's (identity and key)"
    forged = text.replace(".7.", ".8.")
    assert key.decode_stored(P0, forged) is None and key.decode_stored(P0, "garbage") is None
    assert key.decode_stored(P0, None) is None
    assert key.secret.hex() not in text


def test_a_cypherl_sink_keeps_the_last_mark_of_each_partition_beside_its_offsets(tmp_path):
    key = MarkKey.new()
    sink = CypherlSink(str(tmp_path / "out.cypherl"))
    first, second = key.encode_stored(P0, ChangeMark(1, 5, 9)), key.encode_stored(P0, ChangeMark(2, 3, 7))
    sink.write([*mark_statements("s", {P0: first}), *offset_statements("s", {P0: 5})])
    sink.write([Statement("CREATE (:R {o: $o})", {"o": 5}), *offset_statements("s", {P0: 6})])   # a batch
    sink.write([*mark_statements("s", {P0: second}), *offset_statements("s", {P0: 3})])
    sink.write([*mark_statements("other", {P1: first}), *offset_statements("other", {P1: 1})])
    assert sink.stored_offsets("s") == {P0: 3}, "the marks leave the offsets as they were"
    assert sink.stored_marks("s") == {P0: second}
    assert sink.stored_marks("s", [P1]) == {} and sink.stored_marks("other") == {P1: first}
    assert MARK_LINE.search((tmp_path / "out.cypherl").read_text()), "a statement Memgraph loads"
    sink.close()


def test_on_an_engine_without_transactions_an_offset_change_is_one_statement_and_a_batch_stays_as_it_is():
    """FalkorDB applies each statement whole (a refused one leaves nothing), two not: an offset change's marks and
    offsets go as one (the soak's mark without its offsets: tests/host/test_sink_change_marks.py)."""
    marks, offsets = mark_statements("s", {P0: "m0", P1: "m1"}), offset_statements("s", {P0: 5, P1: 7})
    [one] = change_as_one_statement([*marks, *offsets])
    assert one.query == CHANGE_QUERY
    assert one.parameters == {"marks": [dict(m.parameters) for m in marks],
                              "offsets": [dict(o.parameters) for o in offsets]}
    batch = [Statement("CREATE (:R {o: $o})", {"o": 5}), *offset_statements("s", {P0: 6})]
    assert change_as_one_statement(batch) == batch, "a batch's data and offsets: the engine's stated limit"
    assert change_as_one_statement(marks) == marks and change_as_one_statement([]) == []
