"""A host whose streams write to the pymgclient stand-in (tests/support/mgclient_standin), and what its journal
says they committed: each committed Bolt transaction is a JSON line with the writer's pid and its statements, so a
test sees from outside the processes what each stream (each task) wrote."""
from __future__ import annotations

import os
from pathlib import Path

from host_helpers import HostProcess
from mgclient_standin import mgclient as standin
from paths import ROOT, SUPPORT
from stream_helpers import RECORD_QUERY

SINK = "bolt://memgraph:7687"   # any Bolt URI on an allowed host: the stand-in answers it


def journaling_host(directory: Path, **env: str) -> HostProcess:
    """A started host on `directory`/state whose stream processes import the stand-in as `mgclient` and journal
    every committed transaction (rows recorded, no round-trip delay) in `directory`/journal.jsonl, its path as
    the host's `journal`; `env` adds to or replaces the host's environment."""
    journal = directory / "journal.jsonl"
    host = HostProcess(directory / "state", env={
        "PYTHONPATH": os.pathsep.join((standin.PYTHONPATH_ENTRY, str(SUPPORT), str(ROOT))),
        "MGCLIENT_STANDIN_JOURNAL": str(journal), "MGCLIENT_STANDIN_RECORD": "rows", "MGCLIENT_STANDIN_RTT_MS": "0",
        "MGSTREAMS_ALLOWED_HOSTS": "memgraph,localhost,127.0.0.0/8", **env}).start()   # the sink's host, by name
    host.journal = journal
    return host


def transactions(journal: Path, topic: str) -> list[tuple[int, list[tuple[int, int]]]]:
    """(pid, [(partition, offset), ...]) of every committed transaction with records of `topic`, in commit
    order."""
    out = []
    for entry in standin.journal_entries(journal):
        records = [(params["partition"], params["offset"]) for query, params in entry["statements"]
                   if query == RECORD_QUERY and params.get("topic") == topic]
        if records:
            out.append((entry["pid"], records))
    return out


def written(journal: Path, topic: str) -> list[tuple[int, int, int]]:
    """(pid, partition, offset) of every record of `topic` committed, in commit order."""
    return [(pid, partition, offset) for pid, records in transactions(journal, topic) for partition, offset in records]
