"""Consumer lag: verdicts (Burrow's rules, pure), lag in seconds (pure), and their collection from a registry.

`verdict` and `seconds` are functions over samples, tested with tables; the
`collector` samples a StreamRegistry's streams on a background thread and keeps
the last hour per partition for the host's API, metrics and pages.
"""
from ..model import LagSecondsMethod, Verdict
from .verdict import LagSample, OffsetChangeMark, PartitionVerdict, evaluate, worst

__all__ = ["LagSample", "LagSecondsMethod", "OffsetChangeMark", "PartitionVerdict", "Verdict", "evaluate", "worst"]
