"""The Bolt stand-in's journal (tests/support/mgclient_standin) is how host tests see what each stream process
committed: a line per committed transaction. Two processes (two tasks of a stream) append to it while a test
reads it, and a test may SIGKILL one mid-append. The reader sees whole commits only: not the part of an append
still in progress (seen once under load in test_stream_tasks' killed-task test: `Unterminated string`), and not a
line a killed process cut short, nor does that torn line swallow the next process's commit."""
from __future__ import annotations

import json

from mgclient_standin.mgclient import Server, journal_entries
from standin_journal import written
from stream_helpers import RECORD_QUERY


def commit(server: Server, offset: int) -> None:
    conn = server.connect(host="h")
    conn.cursor().execute(RECORD_QUERY, {"topic": "t", "partition": 0, "offset": offset, "payload": "x"})
    conn.commit()


def offsets(path) -> list[int]:
    """What the host tests read (standin_journal.written): the offsets of topic t committed, in order."""
    return [offset for _, _, offset in written(path, "t")]


def test_an_append_in_progress_is_not_read_and_a_torn_line_keeps_to_itself(tmp_path):
    journal = tmp_path / "journal.jsonl"
    server = Server(rtt_ms=0, journal=str(journal), record_rows=True)
    commit(server, 0)
    whole = journal.read_bytes()
    next_line = json.dumps({"pid": 1, "statements": [[RECORD_QUERY, {"topic": "t", "offset": 1}]]}).encode()
    journal.write_bytes(whole + next_line[:40])            # another process's append, part way
    assert offsets(journal) == [0], "an append in progress is not a commit yet"
    commit(server, 2)                                      # ... and that process was killed: the next commit
    assert offsets(journal) == [0, 2], "the torn line is left out, the commit after it read whole"
    assert journal.read_bytes().count(b"\n") == 3          # the torn line ended by the next commit's newline
    assert journal_entries(tmp_path / "none.jsonl") == []
