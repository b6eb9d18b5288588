"""A process of ours that faults in C says where, in its stderr (stream_registry/crash_stacks.py)."""
from __future__ import annotations

import subprocess
import sys

from paths import ROOT

CRASH = """
import ctypes, sys
sys.path.insert(0, {root!r})
from mgstreams.cli import main
import stream_registry.crash_stacks as crash_stacks
{setup}
crash_stacks.print_stacks_on_crash()
def deep_in_the_stream():
    ctypes.string_at(0)   # a fault, as a C library's
deep_in_the_stream()
"""


def _run(setup: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CRASH.format(root=str(ROOT), setup=setup)], capture_output=True,
                          text=True, timeout=60)


def test_a_fault_prints_the_python_stack_of_where_it_happened():
    result = _run()
    assert result.returncode == -11
    assert "Segmentation fault" in result.stderr and "deep_in_the_stream" in result.stderr, result.stderr


def test_without_a_stderr_that_is_a_file_it_changes_nothing():
    """(an embedding application's process, its stderr captured in memory): no error, the process runs on."""
    result = _run("import io; sys.__stderr__ = None; sys.stderr = io.StringIO()")
    assert result.returncode == -11 and "Traceback" not in result.stderr and "deep_in_the_stream" not in result.stderr
