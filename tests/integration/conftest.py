"""The integration tier: needs the Kafka cluster, in process (the embedded cluster) or the session's broker (`make test-tansu`)."""
from __future__ import annotations

from pathlib import Path

from tiers import mark_tier


def pytest_collection_modifyitems(items):
    mark_tier(items, Path(__file__).parent)
