"""The state enums are `StrEnum`s: each member is its string everywhere a user or the state store sees it (str(),
f-strings, JSON, SQLite), exactly the strings the previous `(str, Enum)` classes wrote, so a state directory
written by an older mgstreams still loads."""
from __future__ import annotations

import json
import sqlite3
from enum import StrEnum

import pytest

from spark_bridge.bolt_load import PrepareStatus
from spark_bridge.engine import Engine
from stream_registry.config import Delivery, ErrorsTolerance, RestartPolicy, StreamConfig
from stream_registry.model import ChangeStatus, LagSecondsMethod, MoveState, StreamStatus, Verdict
from stream_registry.offset_files import OffsetSource
from stream_registry.registry.runners.runner import Isolation
from stream_registry.registry.state.state_store import STATE_FILE, StateStore
from stream_registry.registry.stream.dead_letter import Stage

ENUMS = [StreamStatus, ChangeStatus, MoveState, Verdict, LagSecondsMethod, RestartPolicy, Delivery,
         ErrorsTolerance, OffsetSource, Stage, Isolation, Engine, PrepareStatus]
MEMBERS = [member for enum in ENUMS for member in enum]


@pytest.mark.parametrize("member", MEMBERS, ids=repr)
def test_a_member_is_its_value_as_text_json_and_sqlite(member):
    assert isinstance(member, StrEnum)
    assert str(member) == member.value and f"{member}" == member.value and f"{member:>3}" == f"{member.value:>3}"
    assert json.dumps({"s": member}) == json.dumps({"s": member.value})
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (v TEXT)")
    db.execute("INSERT INTO t VALUES (?)", (member,))
    assert db.execute("SELECT v, typeof(v) FROM t").fetchone() == (member.value, "text")
    assert type(member)(member.value) is member


def test_the_values_users_and_stored_state_see_are_unchanged():
    # The strings the previous version wrote to the state store, the API and the Prometheus labels.
    assert [s.value for s in StreamStatus] == ["created", "starting", "running", "stopped", "error"]
    assert [s.value for s in Verdict] == ["OK", "STARTING", "REWIND", "WARN", "STALL", "STOP", "ERR"]   # ERR: new
    assert [s.value for s in ChangeStatus] == ["planned", "applied", "clamped", "pending", "unchanged",
                                               "superseded", "cancelled", "error", "skipped", "dead_lettered",
                                               "realigned", "lost"]
    assert (RestartPolicy.ON_FAILURE, Delivery.EXACTLY_ONCE, ErrorsTolerance.ALL, Stage.SINK) == \
        ("on-failure", "exactly_once", "all", "TASK_PUT")


def test_a_state_directory_written_by_the_previous_version_loads(tmp_path):
    """Rows as an older mgstreams stored them (plain strings in the config JSON and the status column) read back
    as the enum members; what this version writes is the same text."""
    store = StateStore(tmp_path)
    config = StreamConfig(name="s", topics=["t"], bootstrap_servers="localhost:9092", transform="m.f",
                          sink="null://", restart=RestartPolicy.NEVER, delivery=Delivery.EXACTLY_ONCE,
                          errors_tolerance=ErrorsTolerance.ALL, dead_letter_topic="dlq")
    store.insert_stream(config)
    store.set_status("s", StreamStatus.ERROR, "boom", desired_running=True)
    store.close()
    db = sqlite3.connect(tmp_path / STATE_FILE)
    text, status = db.execute("SELECT config, status FROM streams").fetchone()
    stored = json.loads(text)
    assert (stored["restart"], stored["delivery"], stored["errors_tolerance"], status) == \
        ("never", "exactly_once", "all", "error")
    # what an older version wrote: the same row with its values as plain JSON strings
    db.execute("UPDATE streams SET config = ?, status = ?", (json.dumps({**stored}), "stopped"))
    db.commit()
    db.close()
    store = StateStore(tmp_path)
    try:
        [(loaded, desired, status, error)] = store.load_streams()
    finally:
        store.close()
    assert loaded.restart is RestartPolicy.NEVER and loaded.delivery is Delivery.EXACTLY_ONCE
    assert loaded.errors_tolerance is ErrorsTolerance.ALL and status is StreamStatus.STOPPED
    assert (desired, error) == (True, "boom")
