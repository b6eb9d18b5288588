"""The spark tier: needs a SparkSession or Spark Connect (the session's fixtures: tests/conftest.py)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from tiers import mark_tier


def pytest_collection_modifyitems(items):
    mark_tier(items, Path(__file__).parent)


@pytest.fixture(autouse=True)
def private_engine_costs(tmp_path_factory, monkeypatch):
    """`mgstreams backfill` keeps what each engine cost in the default state directory (spark_bridge.engine_costs):
    a test's backfills keep theirs in a directory of the test's own, never in the user's."""
    if "MGSTREAMS_STATE_DIR" not in os.environ:
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("xdg-state")))
