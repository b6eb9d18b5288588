"""Hypothesis example counts relative to the loaded profile (tests/conftest.py registers them): a test that wants
`n` examples under the everyday profile (max_examples 100) gets n scaled by the profile's max_examples / 100."""
from __future__ import annotations

from hypothesis import settings


def examples(n: int) -> int:
    return max(1, n * settings.default.max_examples // 100)
