"""Where things are, for tests: the repository's root and this directory (what child processes put on their
PYTHONPATH to import the test helpers)."""
from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
ROOT = SUPPORT.parents[1]


def nav_pages(nav) -> list[str]:
    """The pages of mkdocs.yml's `nav`, in order (sections nest lists of {title: page})."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    return [page for item in nav for page in nav_pages(item)]
