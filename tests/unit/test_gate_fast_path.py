"""The worker's fast path over one consume() (offset_gate.lets_through): a partition's records are taken without
asking the gate per partition only where check_delivery would let them through and change nothing."""
from __future__ import annotations

from gate_port import GatePort

from stream_registry.model import PartitionKey
from stream_registry.registry.stream.offset_gate import OffsetGate

P0, P1 = PartitionKey("t", 0), PartitionKey("t", 1)


def test_only_assigned_settled_partitions_with_nothing_to_decide_are_let_through_whole():
    now = [0.0]
    gate = OffsetGate(GatePort(), lambda event: None, clock=lambda: now[0])
    assert not gate.lets_through({P0}), "not assigned"
    gate.on_assign({P0: 10, P1: None})   # P1 resumes where the group stands: its start is not known yet
    gate.after_assign()
    assert gate.lets_through({P0}) and gate.lets_through([])
    assert not gate.lets_through({P0, P1}), "P1's first record settles it: asked"
    assert gate.check_delivery(P1, 3)
    assert gate.lets_through({P0, P1})
    gate.request(1, {P0: 4})   # an offset change: sought, and its first record is expected
    gate.retry()
    assert not gate.lets_through({P0}) and gate.lets_through({P1})
    assert not gate.check_delivery(P0, 11), "a record fetched before the move"
    assert gate.check_delivery(P0, 4)
    now[0] += 60.0   # past the hurry after a move
    assert gate.moved is False and gate.lets_through({P0, P1})
    gate.on_revoke([P1])
    assert not gate.lets_through({P1})
