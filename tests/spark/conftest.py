"""The spark tier: needs a SparkSession or Spark Connect (the session's fixtures: tests/conftest.py)."""
from __future__ import annotations

from pathlib import Path

from tiers import mark_tier


def pytest_collection_modifyitems(items):
    mark_tier(items, Path(__file__).parent)
