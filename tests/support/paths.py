"""Where things are, for tests: the repository's root and this directory (what child processes put on their
PYTHONPATH to import the test helpers)."""
from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
ROOT = SUPPORT.parents[1]
