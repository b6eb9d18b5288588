"""The unit between a transformation and a sink: one Cypher query with its parameters."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Statement:
    """One Cypher query with its parameters: what a transformation returns, normalised, and what a sink writes."""

    query: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
