"""What the offset gate (offset_gate.py) keeps per change and per assigned partition: its state, apart from its
transitions."""
from __future__ import annotations

from dataclasses import dataclass

from ...model import MoveState, PartitionKey
from .change_marks import ChangeMark


@dataclass
class Move:
    """One partition's part of one offset change, in its state (offset_gate.py's docstring names them)."""
    change_id: int
    tp: PartitionKey
    offset: int
    state: MoveState = MoveState.REQUESTED
    reason: str | None = None
    retry_at: float = 0.0
    onward: bool = False          # never a move back (offset_gate.py's docstring)
    note: str | None = None       # why the move went elsewhere than its target (reported when persisted)


@dataclass
class GatePartition:
    """An assigned partition as the gate sees it."""
    position: int | None = None   # the next offset the stream delivers, when known
    settled: bool = False         # its start is decided (explicit offset, or a message delivered)
    expect: tuple[int, int | None] | None = None   # after a move: (target, origin) until the first delivery
    mark: ChangeMark | None = None   # the last change of this stream persisted on it, as its commit says (ours only)
    raw_start: bool = False   # assigned at a raw start (nothing stored or committed of it): it stood at no offset
    withheld: bool = False    # a move whose persist failed had nowhere to go back to: nothing delivered until retried
