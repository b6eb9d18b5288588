"""The adversarial tier: fuzz, hostile input and soak-like runs: what a careless or hostile user and long runs do."""
from __future__ import annotations

from pathlib import Path

from tiers import mark_tier


def pytest_collection_modifyitems(items):
    mark_tier(items, Path(__file__).parent)
