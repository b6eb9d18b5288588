"""The cypherl sink's compare-and-set against a model, with the file edited behind the sink's back (issue 34).

A writer keeps `expect` as the stream's worker does (its view of the stored offset, moved by each write and, on a
conflict, to what the sink says it stores). Between its writes, someone else cuts the file back at a batch
boundary, truncates it in the middle of a batch, replaces it (a copy of a prefix renamed over it: a new inode),
rotates it away (renamed: the path names nothing), or appends to it with a second sink. Whatever happened, the
next write is refused (StoredOffsetsConflict, nothing written) unless it continues from what the file holds now,
the conflict says what the file holds, and the file holds exactly the batches the model says, once each.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from stream_registry.errors import StoredOffsetsConflict
from stream_registry.graph.cypherl_frames import FRAME_PREFIX, offsets_in_cypherl
from stream_registry.graph.offset_store import offset_statements
from stream_registry.graph.sinks import CypherlSink, Written
from stream_registry.graph.transform import Statement

CREATE = "CREATE (:Msg {offset: $offset})"
TP = ("t", 0)
_OFFSET = re.compile(r"^CREATE \(:Msg \{offset: (\d+)\}\);$", re.M)


def batch(first: int, count: int) -> list[Statement]:
    return [*(Statement(CREATE, {"offset": o}) for o in range(first, first + count)),
            *offset_statements("s", {TP: first + count})]


class CypherlExternalEdits(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="cypherl-model-")
        self.path = os.path.join(self.dir, "out.cypherl")
        self.sink = CypherlSink(self.path)
        self.view: int | None = None                 # the writer's view of the stored offset (the worker's)
        self.batches: list[tuple[list[int], int]] = []   # what the file holds: each batch's offsets, stored after

    def teardown(self):
        self.sink.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def stored(self) -> int | None:
        return self.batches[-1][1] if self.batches else None

    def _batch_ends(self) -> list[int]:
        """Where each batch ends in the file (after its frame line), the file's opening empty frame first."""
        ends, position = [], 0
        with open(self.path, "rb") as f:
            for line in f:
                position += len(line)
                if line.startswith(FRAME_PREFIX):
                    ends.append(position)
        return ends

    @rule(count=st.integers(1, 4))
    def write(self, count):
        first = self.view if self.view is not None else 0
        if self.stored is not None and first + count == self.stored:   # another writer wrote this very batch
            assert self.sink.write(batch(first, count), expect={TP: self.view}) is Written.ALREADY_APPLIED
            self.view = self.stored
            return
        if self.view != self.stored:
            with pytest.raises(StoredOffsetsConflict) as conflict:
                self.sink.write(batch(first, count), expect={TP: self.view})
            assert conflict.value.stored == ({} if self.stored is None else {TP: self.stored})
            self.view = self.stored
            return
        assert self.sink.write(batch(first, count), expect={TP: self.view}) is Written.APPLIED
        self.batches.append((list(range(first, first + count)), first + count))
        self.view = first + count
        with open(self.path) as f:
            assert [int(o) for o in _OFFSET.findall(f.read())] == [o for offsets, _ in self.batches for o in offsets]

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def cut_at_a_batch_boundary(self, data):
        keep = data.draw(st.integers(0, len(self.batches) - 1))
        os.truncate(self.path, self._batch_ends()[keep])
        del self.batches[keep:]

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def truncate_in_a_batch(self, data):
        ends = self._batch_ends()
        torn = data.draw(st.integers(1, len(self.batches)))    # the batch cut in its middle
        os.truncate(self.path, data.draw(st.integers(ends[torn - 1] + 1, ends[torn] - 1)))
        del self.batches[torn - 1:]

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def replace_with_a_copy(self, data):
        keep = data.draw(st.integers(0, len(self.batches)))
        with open(self.path, "rb") as f:
            prefix = f.read(self._batch_ends()[keep])
        copy = self.path + ".restore"
        with open(copy, "wb") as f:
            f.write(prefix)
        os.replace(copy, self.path)
        del self.batches[keep:]

    @precondition(lambda self: os.path.exists(self.path))
    @rule()
    def rotate(self):
        os.replace(self.path, self.path + ".1")
        self.batches = []

    @precondition(lambda self: self.stored is not None)
    @rule(ahead=st.integers(1, 3))
    def another_writer_appends(self, ahead):
        """A second sink (a zombie, another process) appends a batch past what is stored."""
        first = self.stored
        with CypherlSink(self.path) as other:
            assert other.write(batch(first, ahead), expect={TP: first}) is Written.APPLIED
        self.batches.append((list(range(first, first + ahead)), first + ahead))

    @invariant()
    def a_reader_sees_what_the_model_holds(self):
        found = offsets_in_cypherl(self.path, "s")
        assert found == ({} if self.stored is None else {TP: self.stored})


TestCypherlExternalEdits = CypherlExternalEdits.TestCase
TestCypherlExternalEdits.settings = settings(max_examples=40, stateful_step_count=20, deadline=None)
