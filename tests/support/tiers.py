"""The test tiers: each tier's conftest.py marks the tests under its folder, so `pytest -m unit` (and
integration, host, spark, adversarial) selects a tier wherever the tests are run from."""
from __future__ import annotations

from pathlib import Path

import pytest

TIERS = ("unit", "integration", "host", "spark", "adversarial")


def mark_tier(items: list[pytest.Item], folder: str | Path) -> None:
    """Add the marker named after `folder` (a tier's directory) to every collected test below it."""
    folder = Path(folder).resolve()
    if folder.name not in TIERS:
        raise ValueError(f"folder: {folder.name!r} is not a test tier ({', '.join(TIERS)})")
    marker = getattr(pytest.mark, folder.name)
    for item in items:
        if item.path.is_relative_to(folder):
            item.add_marker(marker)
