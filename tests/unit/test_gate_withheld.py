"""A change whose persist fails on a partition that stood at a raw start (an exactly-once sink that stores nothing
of it: a sink change's carry-over into a new sink; a new group's reset start) has no offset to go back to. Before,
the gate re-assigned it at that start (OFFSET_BEGINNING) and the stream read the whole log into the new sink while
the change waited for its retry (tests/host/test_sink_change_marks.py saw 0..19 written there). Now it stays at
the target and nothing of it is delivered until the retry persists the change."""
from __future__ import annotations

from gate_port import GatePort

from stream_registry.model import MoveState, PartitionKey, PendingMove
from stream_registry.registry.stream.offset_gate import PERSIST_RETRY_S, OffsetGate

P0, P1 = PartitionKey("t", 0), PartitionKey("t", 1)
OFFSET_BEGINNING = -2


def carried_over():
    """A new process of an exactly-once stream after a sink change: the carry-over (change 1, P0 to 20) pending,
    the new sink storing nothing of P0 (its start OFFSET_BEGINNING) and 5 of P1."""
    now, port, events = [0.0], GatePort(refused="storing the new offset in the sink failed (refused)"), []
    gate = OffsetGate(port, events.append, pending={P0: PendingMove(change_id=1, offset=20)}, clock=lambda: now[0])
    assert gate.on_assign({P0: OFFSET_BEGINNING, P1: 5}) == {P0: 20, P1: 5}
    gate.after_assign()
    return now, port, events, gate


def test_a_refused_carry_over_is_not_read_from_the_log_start_meanwhile():
    now, port, events, gate = carried_over()
    assert ("reassign", P0, None) not in port.calls and ("reassign", P0, OFFSET_BEGINNING) not in port.calls, \
        port.calls
    [waiting] = [e for e in events if e.state == MoveState.WAITING and e.reason]
    assert "not read meanwhile" in waiting.reason, waiting.reason
    assert not gate.check_delivery(P0, 20) and not gate.check_delivery(P0, 21), "withheld until persisted"
    assert not gate.lets_through({P0}) and gate.check_delivery(P1, 5), "another partition goes on"
    gate.retry()   # not due yet: nothing tried
    assert port.calls.count(("persist", {P0: 20})) == 1
    now[0] += PERSIST_RETRY_S
    gate.retry()   # refused again: still withheld
    assert port.calls.count(("persist", {P0: 20})) == 2 and not gate.check_delivery(P0, 22)
    port.refused = None
    now[0] += PERSIST_RETRY_S
    gate.retry()
    assert port.calls[-2:] == [("seek", P0, 20), ("persist", {P0: 20})], "read again from the target"
    applied = [e for e in events if e.state == MoveState.PERSISTED]
    assert [(e.offset, e.previous_offset) for e in applied] == [(20, None)], "it stood at no offset before"
    assert gate.check_delivery(P0, 20) and gate.check_delivery(P0, 21) and gate.lets_through({P0})


def test_a_partition_that_stood_at_an_offset_is_still_moved_back():
    now, port, events = [0.0], GatePort(refused="storing the new offset in the sink failed (refused)"), []
    gate = OffsetGate(port, events.append, pending={P0: PendingMove(change_id=1, offset=20)}, clock=lambda: now[0])
    gate.on_assign({P0: 7})
    gate.after_assign()
    assert port.calls[-1] == ("seek", P0, 7), port.calls
    assert gate.check_delivery(P0, 7), "read on from where it stood while the change waits"


def test_a_withheld_partition_whose_change_is_cancelled_is_read_from_where_it_starts():
    now, port, events, gate = carried_over()
    assert not gate.check_delivery(P0, 20)
    [cancelled] = gate.cancel()
    assert cancelled.state == MoveState.CANCELLED and port.calls[-1] == ("reassign", P0, None), port.calls
    assert gate.check_delivery(P0, 0), "no change waits: the partition starts where the sink resumes it"
