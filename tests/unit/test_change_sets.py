"""The host's change sets on a real state file: what an onward change (ResolvedOffset.onward) keeps across a
restart, and what the history records when the gate applied a change elsewhere than planned."""
from __future__ import annotations

import sqlite3

from stream_registry.model import ChangeStatus, GateEvent, MoveState, PartitionKey, ResolvedOffset
from stream_registry.registry.change_sets import ChangeSets
from stream_registry.registry.state_store import STATE_FILE, StateStore

TP = PartitionKey("t", 0)


def _planned(offset: int, previous: int, *, onward: bool, clamped: bool, message: str = "") -> ResolvedOffset:
    return ResolvedOffset(topic=TP.topic, partition=TP.partition, previous_offset=previous, offset=offset,
                          clamped=clamped, message=message, onward=onward)


def test_a_pending_onward_change_is_handed_to_the_next_stream_process_as_onward(tmp_path):
    """A stopped stream's "latest" waits in the state file; the stream process that starts later (after a host
    restart too) gets it as onward, so its gate never moves the partition back to it."""
    store = StateStore(tmp_path)
    ChangeSets(store).open("s", [_planned(20, 12, onward=True, clamped=False)], None, running=False)
    store.close()
    again = StateStore(tmp_path)
    [(tp, move)] = ChangeSets(again).pending_moves("s").items()
    assert (tp, move.offset, move.onward) == (TP, 20, True)
    again.close()


def test_an_explicit_change_is_not_onward(tmp_path):
    store = StateStore(tmp_path)
    ChangeSets(store).open("s", [_planned(5, 12, onward=False, clamped=False)], None, running=False)
    assert ChangeSets(store).pending_moves("s")[TP].onward is False
    store.close()


def test_an_older_state_file_gets_the_column_and_its_pending_changes_are_not_onward(tmp_path):
    StateStore(tmp_path).close()
    db = sqlite3.connect(tmp_path / STATE_FILE)
    db.execute("ALTER TABLE pending_changes DROP COLUMN onward")
    db.execute("INSERT INTO pending_changes (stream, change_id, topic, partition, offset, requested_at) "
               "VALUES ('s', 1, 't', 0, 9, 0)")
    db.commit()
    db.close()
    store = StateStore(tmp_path)
    assert ChangeSets(store).pending_moves("s")[TP].onward is False
    store.close()


def test_the_history_records_where_the_partition_really_stood_and_went(tmp_path):
    """Planned 20 -> 20 (clamped to the log end read then); the gate found the stream at 25 and kept it there:
    the history and the call's answer say 25 -> 25, clamped, with the plan's message and the gate's note."""
    store = StateStore(tmp_path)
    changes = ChangeSets(store)
    planned = _planned(20, 20, onward=True, clamped=True, message="requested 1000 is outside [0, 20]; clamped")
    change_id = changes.open("s", [planned], None, running=True)
    changes.on_event("s", GateEvent(change_id=change_id, topic=TP.topic, partition=TP.partition, offset=25,
                                    state=MoveState.PERSISTED, previous_offset=25, reason="it stays at 25"))
    [row] = changes.history("s", None)
    assert (row.previous_offset, row.offset, row.status) == (25, 25, ChangeStatus.CLAMPED)
    assert row.message == "requested 1000 is outside [0, 20]; clamped; it stays at 25"
    [answer] = changes.outcome("s", change_id, [planned], running=True)
    assert (answer.previous_offset, answer.offset, answer.status, answer.message) == \
        (25, 25, ChangeStatus.CLAMPED, row.message)
    assert store.pending_rows("s") == []
    store.close()
