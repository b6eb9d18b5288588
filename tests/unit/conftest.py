"""The unit tier: needs nothing running: no Kafka, no host process, no Spark (under a minute: `make test-unit`)."""
from __future__ import annotations

from pathlib import Path

from tiers import mark_tier


def pytest_collection_modifyitems(items):
    mark_tier(items, Path(__file__).parent)
