"""A real stream host for tests: the product's HostProcess, with tests/ importable in the child.

The child needs `stream_helpers` (the recording transformation tests use) on its path.
"""
from __future__ import annotations

import os
from pathlib import Path

from mgstreams.host.process import HostProcess as _HostProcess

ROOT = Path(__file__).resolve().parent.parent


class HostProcess(_HostProcess):
    def __init__(self, state_dir: str | os.PathLike, *, token: str | None = None, env: dict | None = None,
                 extra_args: tuple[str, ...] = ()):
        super().__init__(state_dir, token=token, extra_args=extra_args, cwd=ROOT,
                         env={"PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}", **(env or {})})
