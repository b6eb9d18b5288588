"""What a Spark stream shows beside the usual fields, without Spark: the query line (describe, top, /ui), its
Prometheus series, and the history rows a resume note becomes. tests/spark/test_spark_host.py shows them through a
real host."""
from __future__ import annotations

from types import SimpleNamespace

from mgstreams.host.metrics import spark_metrics
from spark_bridge.spark_runner import resume_realignments
from stream_registry.model import Realignment
from stream_registry.stream_engine import spark_line

QUERY = {"master": "local[2]", "remote": None, "query_id": "q-1", "run_id": "r-1", "active": True,
         "last_batch_id": 12, "input_rows_per_second": 410.4, "processed_rows_per_second": 395.0,
         "batch_duration_ms": 920, "num_input_rows": 40, "error": None}


def test_the_query_line_says_id_batch_and_rates_or_where_it_would_run():
    assert spark_line(QUERY) == ("spark query q-1, batch 12, input 410 rows/s, processed 395 rows/s, batch 920 ms")
    assert spark_line({**QUERY, "input_rows_per_second": None}).startswith("spark query q-1, batch 12, input - rows/s")
    assert spark_line({"master": "local[2]", "remote": None}) == "spark local[2], no query"
    assert spark_line({"master": None, "remote": "sc://spark:15002"}) == "spark sc://spark:15002, no query"


def test_prometheus_series_of_a_running_query_only():
    infos = [SimpleNamespace(name="sp", spark=QUERY), SimpleNamespace(name="stopped", spark={"master": "local"}),
             SimpleNamespace(name="host", spark=None)]
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in spark_metrics(infos) for s in family.samples}
    assert samples == {
        ("mgstreams_spark_query_info", (("query_id", "q-1"), ("run_id", "r-1"), ("stream", "sp"))): 1.0,
        ("mgstreams_spark_last_batch_id", (("stream", "sp"),)): 12.0,
        ("mgstreams_spark_input_rows_per_second", (("stream", "sp"),)): 410.4,
        ("mgstreams_spark_processed_rows_per_second", (("stream", "sp"),)): 395.0,
        ("mgstreams_spark_batch_duration_seconds", (("stream", "sp"),)): 0.92}


def test_a_resume_note_becomes_realigned_rows_saying_from_where_to_where():
    resumed = {"kind": "resume", "checkpoint": {"t:0": 13, "t:1": 4}, "group": {"t:0": 5, "t:1": 9},
               "resumes": {"t:0": 13, "t:1": 4}}
    assert resume_realignments(resumed) == [
        Realignment(topic="t", partition=0, previous_offset=5, offset=13,
                    reason="the Spark query resumes from its checkpoint at 13; the group's committed offset was 5 "
                           "(committed elsewhere while the query was stopped)"),
        Realignment(topic="t", partition=1, previous_offset=9, offset=4,
                    reason="the Spark query resumes from its checkpoint at 4; the group's committed offset was 9 "
                           "(committed elsewhere while the query was stopped)")]
    realigned = {"kind": "realigned", "epoch": 3, "checkpoint": {"t:0": 20}, "graph": {"t:0": 17},
                 "resumes": {"t:0": 17}}
    assert resume_realignments(realigned) == [Realignment(
        topic="t", partition=0, previous_offset=20, offset=17,
        reason="the Spark query's checkpoint stood at 20; it resumes from the graph's stored offset 17")]
    assert resume_realignments({"kind": "started", "resumes": {"t:0": 3}}) == []
    assert resume_realignments({"kind": "group_commit_failed", "group": "g", "error": "down"}) == []


class FailedQuery:
    """A Spark StreamingQuery that ended with `error` (the runner reads isActive and exception() only)."""
    isActive = False

    def __init__(self, error: str):
        self.error = error

    def exception(self):
        return self.error


def test_a_query_dead_of_spark_s_worker_timeout_starts_again_and_any_other_failure_is_the_error(tmp_path, monkeypatch):
    from spark_bridge import spark_runner
    from stream_registry.model import StreamStatus

    statuses: list = []
    request = SimpleNamespace(config=SimpleNamespace(name="sp"), pending=dict,
                              events=SimpleNamespace(on_status=lambda status, error: statuses.append((status, error))))
    runner = spark_runner.SparkRunner(request, lambda: "session", tmp_path / "sp")
    transient = "Python worker failed to connect back.\n=== Streaming Query ==="
    started = [FailedQuery(transient), FailedQuery(transient), FailedQuery(transient), FailedQuery("boom")]
    monkeypatch.setattr(spark_runner, "start_stream_query", lambda session, query: started.pop(0))
    monkeypatch.setattr(runner, "_query", lambda session=None: None)
    runner.query = FailedQuery(transient)
    runner._watch()    # returns once the query is dead for good
    assert runner.restarts == 3 and len(started) == 1        # started again 3 times, then it is the error
    assert statuses == [(StreamStatus.ERROR, f"spark: the query failed: {transient}")], statuses

    statuses.clear()
    other = spark_runner.SparkRunner(request, lambda: "session", tmp_path / "sp2")
    other.query = FailedQuery("[FOREACH_BATCH_USER_FUNCTION_ERROR] IsADirectoryError")
    other._watch()
    assert other.restarts == 0
    assert statuses == [(StreamStatus.ERROR, "spark: the query failed: [FOREACH_BATCH_USER_FUNCTION_ERROR] "
                                             "IsADirectoryError")]


def test_a_start_that_spark_refuses_is_tried_again_when_transient_else_a_stream_error(tmp_path, monkeypatch):
    import pytest

    from spark_bridge import spark_runner
    from stream_registry.errors import StreamError

    request = SimpleNamespace(config=SimpleNamespace(name="sp"), pending=dict, events=SimpleNamespace())
    runner = spark_runner.SparkRunner(request, lambda: "session", tmp_path / "sp")
    monkeypatch.setattr(runner, "_query", lambda session=None: None)
    raised = [RuntimeError("Python worker failed to connect back."), RuntimeError("Python worker failed to connect "
                                                                                 "back."), "query"]

    def start(session, query):
        answer = raised.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer
    monkeypatch.setattr(spark_runner, "start_stream_query", start)
    assert runner._start_query() == "query" and runner.restarts == 2
    monkeypatch.setattr(spark_runner, "start_stream_query", lambda s, q: (_ for _ in ()).throw(RuntimeError("no")))
    with pytest.raises(StreamError, match="spark: the query could not start: no"):
        runner._start_query()
