"""The test tiers: each tier's conftest.py marks the tests under its folder, so `pytest -m unit` (and
integration, host, spark, adversarial) selects a tier wherever the tests are run from."""
from __future__ import annotations

from pathlib import Path

import pytest

TIERS = ("unit", "integration", "host", "spark", "adversarial")
# The session's fixtures that start something (a Kafka cluster or broker, a host, Spark): not for the unit tier.
RUNNING = frozenset({"kafka", "embedded_kafka", "quick_rebalance", "host", "spark", "spark_connect"})


def mark_tier(items: list[pytest.Item], folder: str | Path) -> None:
    """Add the marker named after `folder` (a tier's directory) to every collected test below it."""
    folder = Path(folder).resolve()
    if folder.name not in TIERS:
        raise ValueError(f"folder: {folder.name!r} is not a test tier ({', '.join(TIERS)})")
    marker = getattr(pytest.mark, folder.name)
    mine = [item for item in items if item.path.is_relative_to(folder)]
    for item in mine:
        item.add_marker(marker)
    if folder.name == "unit":
        running = [f"{item.nodeid} ({', '.join(sorted(RUNNING & set(item.fixturenames)))})" for item in mine
                   if RUNNING & set(item.fixturenames)]
        if running:
            raise pytest.UsageError("tests/unit needs nothing running, but these tests ask for a fixture that starts "
                                    "something; move them to the tier they need:\n" + "\n".join(running))
