"""The operator's side: `mgstreams ARGS` in a child process, and the procedures' rows as the core's values."""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from stream_registry import ChangeStatus, OffsetChange, PartitionOffsets, StreamError

from ..query_module import QueryModule
from ..settings import URL_ENV
from .reporter import SILENT, Reporter


def run_cli(url: str, *args: str, reporter: Reporter = SILENT, timeout: float = 60.0) -> str:
    """`mgstreams ARGS` in a child process with MGSTREAMS_URL set, as an operator's shell runs it."""
    done = subprocess.run([sys.executable, "-m", "mgstreams", *args], env={**os.environ, URL_ENV: url},
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    reporter.command(("mgstreams", *args), done.stdout + done.stderr)
    if done.returncode != 0:
        raise StreamError(f"mgstreams {' '.join(args)}: exit status {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def offset_change(row: Mapping[str, Any]) -> OffsetChange:
    return OffsetChange(topic=row["topic"], partition=row["partition"], previous_offset=row["previous_offset"],
                        offset=row["offset"],
                        status=ChangeStatus(row["status"]), message=row.get("message") or "")


def partition_offsets(row: Mapping[str, Any]) -> PartitionOffsets:
    return PartitionOffsets(topic=row["topic"], partition=row["partition"], committed_offset=row["committed_offset"],
                            position=row["position"],
                            log_start_offset=row["log_start_offset"], log_end_offset=row["log_end_offset"],
                            lag=row["lag"], assigned=bool(row["assigned"]))


def stream_row(streams: QueryModule, name: str, quiet: bool = False) -> dict[str, Any]:
    """The stream's row of `CALL streams.list()`."""
    for row in streams.call("list", quiet=quiet):
        if row["name"] == name:
            return row
    raise StreamError(f"CALL streams.list(): no stream named {name!r}")
