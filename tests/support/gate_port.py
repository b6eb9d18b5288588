"""The offset gate's consumer port (offset_gate.ConsumerPort) for unit tests: it records each call; seeks and
re-assigns succeed; a persist fails with `refused` while that is set."""
from __future__ import annotations


class GatePort:
    def __init__(self, refused: str | None = None):
        self.calls: list = []
        self.refused = refused

    def seek(self, tp, offset):
        self.calls.append(("seek", tp, offset))
        return True

    def reassign(self, tp, offset):
        self.calls.append(("reassign", tp, offset))

    def persist(self, offsets, marks):
        self.calls.append(("persist", dict(offsets)))
        return self.refused
