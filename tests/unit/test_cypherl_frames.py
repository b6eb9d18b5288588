"""cypherl files: a batch is whole or absent after any kill, and every line splits as mgconsole splits it.

Issue 21, reproductions 2, 3 and 6: a SIGKILL of the writing process in the
middle of a large append left a partial batch and a torn line that the restart
appended after (offsets twice, and `mgconsole < file` stopped there); reading
the stored offsets scanned the whole file; a backticked key holding `;`, `"`
or `'` was cut by mgconsole's splitter, which ignores backticks. mgconsole's
splitter is ported below from its source (memgraph/mgconsole,
src/utils/utils.cpp: `ParseLine`, `GetQuery`, `GetLine`) to read the files
as `mgconsole < file` does.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
from examples import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from stream_helpers import delivered_from_file

import stream_registry
from stream_registry.builtin_transformations import json_nodes
from stream_registry.graph import cypherl_frames, sinks
from stream_registry.graph.offset_store import OFFSET_LINE, offset_statements
from stream_registry.graph.sinks import CypherlSink, read_stored_offsets
from stream_registry.graph.transform import Message, Statement, run_transformation

ROOT = Path(stream_registry.__file__).resolve().parent.parent
CREATE = "CREATE (:Msg {topic: $topic, partition: $partition, offset: $offset, pad: $pad})"


# -- mgconsole's splitter, ported -------------------------------------------------------------------------------
class MgconsoleReader:
    """`mgconsole < file`, non-interactive: the queries it sends, in order (its GetQuery loop over GetLine)."""

    def __init__(self, text: str):
        lines = text.split("\n")
        self._lines = iter(lines[:-1])  # std::getline: a last line without '\n' sets eof, and GetLine drops it
        self._default_text = ""          # mgconsole_global_default_text: what followed a ';' on its line

    def queries(self) -> list[str]:
        out = []
        while (query := self._get_query()) is not None:
            out.append(query)
        return out

    def _get_line(self) -> str | None:
        line = next(self._lines, None)
        if line is None:
            return None
        line, self._default_text = self._default_text + line, ""
        return line

    def _get_query(self) -> str | None:
        state = {"quote": "", "escaped": False}
        parsed, done = parse_line(self._default_text, state)
        if done:
            self._default_text = self._default_text[len(parsed) + 1:].strip()
            return parsed
        query = []
        while True:
            line = self._get_line()
            if line is None:
                return None          # an unfinished query at the end of input is never sent
            if not line:
                continue
            parsed, done = parse_line(line, state)
            query.append(parsed)
            count = len(parsed)
            if done:
                count += 1
            else:
                query.append("\n")
            if count < len(line):
                self._default_text = line[count:].strip()
            if done:
                return "".join(query)


_SPECIAL = re.compile(r"[\\\\\"';]")


def parse_line(line: str, state: dict) -> tuple[str, bool]:
    """mgconsole's ParseLine: quotes and backslash escapes, no backticks, no comments; ';' outside a quote ends.

    Its loop, character by character, does nothing with a character other than `\\`, `"`, `'` and `;` but
    append it and clear `escaped`: here runs of those are taken at once (the files hold 100 MB lines).
    """
    at = 0
    for match in _SPECIAL.finditer(line):
        if match.start() > at:
            state["escaped"] = False          # ordinary characters before this one
        c, at = match.group(), match.end()
        if state["quote"] and c == "\\":
            state["escaped"] = not state["escaped"]
            continue
        if (not state["quote"] and c in "\"'") or (not state["escaped"] and c == state["quote"]):
            state["quote"] = "" if state["quote"] else c
        elif not state["quote"] and c == ";":
            return line[:match.start()], True
        state["escaped"] = False
    if len(line) > at:
        state["escaped"] = False
    return line, False


def parse_line_char_by_char(line: str, state: dict) -> tuple[str, bool]:
    """ParseLine as mgconsole writes it, one character at a time (parse_line takes runs at once)."""
    parsed = []
    for c in line:
        if state["quote"] and c == "\\":
            state["escaped"] = not state["escaped"]
            parsed.append(c)
            continue
        if (not state["quote"] and c in "\"'") or (not state["escaped"] and c == state["quote"]):
            state["quote"] = "" if state["quote"] else c
        elif not state["quote"] and c == ";":
            return "".join(parsed), True
        parsed.append(c)
        state["escaped"] = False
    return "".join(parsed), False


@settings(max_examples=examples(1000), deadline=None)   # a small space: 8 characters, up to 14
@given(line=st.text("ab \\\"';`", max_size=14), quote=st.sampled_from(["", '"', "'"]), escaped=st.booleans())
def test_the_splitter_taking_runs_at_once_is_mgconsoles_char_by_char(line, quote, escaped):
    mine, theirs = {"quote": quote, "escaped": escaped}, {"quote": quote, "escaped": escaped}
    assert parse_line(line, mine) == parse_line_char_by_char(line, theirs) and mine == theirs


def without_comments(query: str) -> str:
    """A query as Memgraph parses it after mgconsole: frame lines (// comments) before it dropped."""
    return "\n".join(line for line in query.split("\n") if not line.startswith("//")).strip()


def test_the_ported_splitter_reads_what_mgconsole_reads():
    text = 'CREATE (:A {s: "a;b"});\nMATCH (n)\nRETURN n;\n// a comment\nRETURN \'it\\\'s\';\n// trailing'
    assert MgconsoleReader(text + "\n").queries() == ['CREATE (:A {s: "a;b"})', "MATCH (n)\nRETURN n",
                                                      "// a comment\nRETURN 'it\\'s'"]
    assert MgconsoleReader("CREATE (:A {`a;b`: 1});\n").queries() == ["CREATE (:A {`a", "b`: 1})"]   # cut


KEYS = ["a;b", 'say "hi"', "it's", "both ' and \";", "back\\slash;", "`tick`;", "plain", "semi;colon'"]


def test_json_nodes_keys_with_quotes_and_semicolons_split_where_memgraph_does(tmp_path):
    payloads = [{key: i for key in KEYS} | {"n": i} for i in range(3)]
    messages = [Message("t", 0, i, None, json.dumps(p).encode(), 0) for i, p in enumerate(payloads)]
    statements = run_transformation(json_nodes, messages)
    path = tmp_path / "out.cypherl"
    with CypherlSink(str(path)) as sink:
        sink.write(statements)
        sink.write(offset_statements("s", {("t", 0): 3}))
    lines = [line for line in path.read_text().splitlines() if not line.startswith("//")]
    queries = MgconsoleReader(path.read_text()).queries()
    assert len(queries) == len(lines) == 4
    assert [without_comments(q) + ";" for q in queries] == lines
    for key in KEYS[:-2] + KEYS[-1:]:                               # all but the plain one are backticked
        assert f"`{key.replace('`', '``')}`" in lines[0], key


def test_a_key_no_quoting_can_carry_is_refused_naming_it(tmp_path):
    with CypherlSink(str(tmp_path / "out.cypherl")) as sink:
        with pytest.raises(sinks.SinkError, match="cannot be written so that mgconsole reads it") as refused:
            sink.write([Statement("CREATE (n $p)", {"p": {';";\';': 1}})])
    assert refused.value.rejected    # the message's fault: set aside with errors.tolerance 'all'


# -- torn writes -------------------------------------------------------------------------------------------------
WRITER = r"""
import sys
import tempfile
from stream_registry.graph.offset_store import offset_statements
from stream_registry.graph.sinks import CypherlSink
from stream_registry.graph.transform import Statement

path, total, size, pad = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
query = "CREATE (:Msg {topic: $topic, partition: $partition, offset: $offset, pad: $pad})"
sink = CypherlSink(path)
start = sink.stored_offsets("s").get(("t", 0), 0)      # exactly-once: resume where the file says
for first in range(start, total, size):
    count = min(size, total - first)
    batch = [Statement(query, {"topic": "t", "partition": 0, "offset": o, "pad": "x" * pad})
             for o in range(first, first + count)]
    sink.write(batch + offset_statements("s", {("t", 0): first + count}))
    print(first + count, flush=True)
"""


def _writer(path: Path, total: int, size: int, pad: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(total), str(size), str(pad)],
                            stdout=subprocess.PIPE, text=True, env=env)


def _ends_with_whole_batch(path: Path) -> bool:
    data = path.read_bytes()
    last = data[data.rstrip(b"\n").rfind(b"\n") + 1:]
    return data.endswith(b"\n") and last.startswith(cypherl_frames.FRAME_PREFIX)


def test_a_sigkill_in_the_middle_of_a_large_append_leaves_no_torn_line_and_no_offset_twice(tmp_path):
    """Batches of 1000 statements of 20 kB (20 MB a write): the writer is killed as soon as the file grows
    past a batch, inside the write. Reopened, the file is cut back to its last whole batch; the rest appended
    after it, every offset is in the file once and every line splits as mgconsole splits it."""
    path, total, size, pad = tmp_path / "big.cypherl", 4000, 1000, 20_000
    torn = 0
    for _ in range(4):
        writer = _writer(path, total, size, pad)
        try:
            assert writer.stdout.readline(), "the writer wrote a batch"
            boundary = path.stat().st_size
            deadline = time.monotonic() + 60
            while path.stat().st_size == boundary and time.monotonic() < deadline:
                time.sleep(0.0005)        # until the next append has begun (a 20 MB write takes far longer)
            writer.send_signal(signal.SIGKILL)
        finally:
            writer.wait(30)
        if not _ends_with_whole_batch(path):
            torn += 1
        if torn:
            break
    assert torn, "a kill landed inside an append"
    assert writer.returncode == -signal.SIGKILL
    writer = _writer(path, total, size, pad)         # the restart, to the end
    assert writer.wait(300) == 0
    text = path.read_text()
    lines = text.splitlines()
    assert all(line.endswith(";") or line.startswith(cypherl_frames.FRAME_PREFIX.decode()) for line in lines)
    counts = Counter(o for _, _, o in delivered_from_file(path))
    assert sorted(counts) == list(range(total)), "every offset written"
    assert [o for o, n in counts.items() if n > 1] == [], "no offset twice"
    queries = MgconsoleReader(text).queries()
    assert len(queries) == sum(1 for line in lines if line.endswith(";")), "mgconsole reads every statement"
    assert read_stored_offsets(f"cypherl://{path}", "s") == {("t", 0): total}
    path.unlink()   # half a gigabyte


def test_opening_cuts_a_torn_batch_and_a_damaged_one_back_to_the_last_whole_batch(tmp_path):
    path = tmp_path / "out.cypherl"
    with CypherlSink(str(path)) as sink:
        for first in (0, 3):
            sink.write([Statement(CREATE, {"topic": "t", "partition": 0, "offset": o, "pad": ""})
                        for o in range(first, first + 3)] + offset_statements("s", {("t", 0): first + 3}))
    whole = path.read_bytes()
    with path.open("ab") as f:                      # what a kill leaves: part of the next batch, a torn line
        f.write(b'CREATE (:Msg {topic: "t", partition: 0, offset: 6, pad: ""});\nCREATE (:Msg {topic: "t", p')
    assert read_stored_offsets(f"cypherl://{path}", "s") == {("t", 0): 6}, "a reader skips the torn tail"
    with CypherlSink(str(path)) as sink:
        assert sink.trimmed == len(path.read_bytes()) - len(whole) or path.read_bytes() == whole
        assert sink.stored_offsets("s") == {("t", 0): 6}
    assert path.read_bytes() == whole
    # a power loss may keep a later page and lose an earlier one: the last batch's CRC no longer matches
    damaged = bytearray(whole)
    damaged[whole.rindex(b"offset: 4")] = ord("X")
    path.write_bytes(bytes(damaged))
    with CypherlSink(str(path)) as sink:
        assert sink.stored_offsets("s") == {("t", 0): 3}
    assert [o for _, _, o in delivered_from_file(path)] == [0, 1, 2]


def test_a_file_written_before_framing_keeps_its_whole_lines_and_is_framed_from_there(tmp_path):
    path = tmp_path / "old.cypherl"
    old = ('CREATE (:Msg {topic: "t", partition: 0, offset: 0, pad: ""});\n'
           'MERGE (o:MgstreamsOffset {stream: "s", topic: "t", partition: 0}) SET o.next_offset = 1;\n'
           'CREATE (:Msg {topic: "t", partition: 0, off')
    path.write_text(old)
    assert read_stored_offsets(f"cypherl://{path}", "s") == {("t", 0): 1}
    with CypherlSink(str(path)) as sink:
        assert sink.stored_offsets("s") == {("t", 0): 1}
        sink.write([Statement(CREATE, {"topic": "t", "partition": 0, "offset": 1, "pad": ""}),
                    *offset_statements("s", {("t", 0): 2})])
    assert path.read_text().startswith(old[:old.rindex("\n") + 1] + "// mgstreams-batch 0 00000000\n")
    assert read_stored_offsets(f"cypherl://{path}", "s") == {("t", 0): 2}


def _bytes_read_by_this_thread() -> int:
    """What this thread passed to read() and pread(), by the kernel's count (/proc/thread-self/io rchar)."""
    for line in Path("/proc/thread-self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/thread-self/io")


def test_reading_the_stored_offsets_costs_a_few_small_reads_whatever_the_size(tmp_path):
    """Issue 21, reproduction 3: a partition never written made every read scan the whole file."""
    path = tmp_path / "big.cypherl"
    with CypherlSink(str(path)) as sink:
        for first in range(0, 4000, 100):
            for partition in (0, 1):
                sink.write([Statement(CREATE, {"topic": "t", "partition": partition, "offset": o, "pad": "y" * 2000})
                            for o in range(first, first + 100)]
                           + offset_statements("s", {("t", partition): first + 100}))
        sink.write(offset_statements("other", {("u", 0): 9}))     # another stream wrote last
    assert path.stat().st_size > 16_000_000
    wanted = [("t", 0), ("t", 1), ("t", 2)]                        # partition 2 was never written
    before = _bytes_read_by_this_thread()
    assert read_stored_offsets(f"cypherl://{path}", "s", partitions=wanted) == {("t", 0): 4000, ("t", 1): 4000}
    read = _bytes_read_by_this_thread() - before
    assert read < 200_000, f"read {read} bytes of {path.stat().st_size}"
    assert OFFSET_LINE.search(path.read_text()[-2000:]), "the offsets are still statements Memgraph loads"


def test_the_describe_cost_bench_runs_and_prints_its_ratio():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "describe_cost.py"), "--gb", "0.01", "--reads", "5",
                           "--dir", str(Path(tempfile.gettempdir()))], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"^  describe +[\d.]+ ms per read", done.stdout, re.M), done.stdout
    assert re.search(r"^ratio: [\d,]+  \(scan / describe", done.stdout, re.M), done.stdout


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_a_kill_at_any_byte_of_any_append_leaves_exactly_the_whole_batches(tmp_path_factory, data):
    """Against a model: a kill leaves a prefix of the last append (the kernel writes a file in order, a SIGKILL
    stops it anywhere). Whatever the batches and wherever the cut, reopening keeps exactly the batches that were
    whole, the stored offsets are the last whole batch's, and the next batch continues from them."""
    path = tmp_path_factory.mktemp("model") / "out.cypherl"
    sink = CypherlSink(str(path))
    stored, whole = None, path.read_bytes()          # the new file's empty frame
    for _ in range(data.draw(st.integers(1, 6), label="batches")):
        first = stored or 0
        count = data.draw(st.integers(1, 5), label="statements")
        size_before = path.stat().st_size
        sink.write([Statement(CREATE, {"topic": "t", "partition": 0, "offset": o,
                                       "pad": data.draw(st.text(max_size=30), label="pad")})
                    for o in range(first, first + count)] + offset_statements("s", {("t", 0): first + count}),
                   expect={("t", 0): stored})
        appended = path.stat().st_size - size_before
        cut = data.draw(st.integers(0, appended), label="bytes of the append kept")
        if cut < appended:                             # killed inside this append
            sink.close()
            with open(path, "r+b") as f:
                f.truncate(size_before + cut)
            sink = CypherlSink(str(path))
            assert path.read_bytes() == whole, "cut back to the last whole batch"
        else:
            stored, whole = first + count, path.read_bytes()
        assert sink.stored_offsets("s") == ({("t", 0): stored} if stored is not None else {})
    sink.close()
    assert [o for _, _, o in delivered_from_file(path)] == list(range(stored or 0))
