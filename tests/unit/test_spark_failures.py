"""Spark's missed Python-worker connect-back is recognised by its Java cause chain, not by its message's words
(spark_bridge.spark_failures): on a classic session through py4j, under Spark Connect from the JVM stack trace the
server sends, and from a classic captured exception's stack trace. The message decides only where no trace exists.

The chain and trace below are Spark 4.3.0's, recorded from a real query whose driver-side source runner missed the
10 s connect-back (PYSPARK_PYTHON a wrapper that sleeps 13 s first): StreamingQueryException (made in
StreamExecution) <- SparkException (PythonWorkerFactory) <- SocketTimeoutException (PythonWorkerFactory); PySpark's
StreamingQueryException said getCondition() None, its text "Python worker failed to connect back. ...".
"""
from __future__ import annotations

from types import SimpleNamespace

from spark_bridge.spark_failures import Thrown, failure_chain, text_chain, transient

RECORDED_CAUSE = (  # the classic StreamingQueryException's cause's JVM stack trace (middle frames left out)
    "org.apache.spark.SparkException: Python worker failed to connect back.\n"
    "\tat org.apache.spark.api.python.PythonWorkerFactory.createSimpleWorker(PythonWorkerFactory.scala:328)\n"
    "\tat org.apache.spark.sql.execution.python.streaming.PythonStreamingSourceRunner.init("
    "PythonStreamingSourceRunner.scala:109)\n"
    "\tat org.apache.spark.sql.execution.datasources.v2.python.PythonScan.toMicroBatchStream(PythonScan.scala:41)\n"
    "Caused by: java.net.SocketTimeoutException: Timed out while waiting for the Python worker to connect back\n"
    "\tat org.apache.spark.api.python.PythonWorkerFactory.createSimpleWorker(PythonWorkerFactory.scala:310)\n"
    "\t... 23 more")
STREAM_FAILED = ("org.apache.spark.sql.streaming.StreamingQueryException: [STREAM_FAILED] Query [id = a1, runId = b2] "
                 "terminated with exception: {said} SQLSTATE: XXKST\n=== Streaming Query ===\nIdentifier: [id = a1]\n"
                 "Current Committed Offsets: {{}}\n\n"
                 "\tat org.apache.spark.sql.execution.streaming.runtime.StreamExecution.runStream(StreamExecution.scala:394)\n"
                 "Caused by: {cause}")
RECORDED_CHAIN = [("org.apache.spark.sql.streaming.StreamingQueryException",
                   "org.apache.spark.sql.execution.streaming.runtime.StreamExecution"),
                  ("org.apache.spark.SparkException", "org.apache.spark.api.python.PythonWorkerFactory"),
                  ("java.net.SocketTimeoutException", "org.apache.spark.api.python.PythonWorkerFactory")]


class JavaThrowable:
    """A Java throwable as py4j shows it (the calls java_chain makes)."""

    def __init__(self, chain):
        (self.cls, self.made_in), rest = chain[0], chain[1:]
        self.cause = JavaThrowable(rest) if rest else None

    def getClass(self):
        return SimpleNamespace(getName=lambda: self.cls)

    def getStackTrace(self):
        return [SimpleNamespace(getClassName=lambda: self.made_in)]

    def getCause(self):
        return self.cause


def classic_query(chain):
    """A classic StreamingQuery whose Java query (`_jsq`) failed with `chain`."""
    failed = SimpleNamespace(isDefined=lambda: True, get=lambda: JavaThrowable(chain))
    return SimpleNamespace(_jsq=SimpleNamespace(exception=lambda: failed))


def test_a_classic_query_is_judged_by_its_java_cause_chain_whatever_it_says():
    assert transient("anything at all", classic_query(RECORDED_CHAIN))
    refused = [*RECORDED_CHAIN[:2], ("java.net.ConnectException", "sun.nio.ch.Net")]   # not the timeout
    assert not transient("Python worker failed to connect back.", classic_query(refused))
    elsewhere = [RECORDED_CHAIN[0], ("org.apache.spark.SparkException", "org.apache.spark.rdd.RDD"),
                 RECORDED_CHAIN[2]]
    assert not transient("Python worker failed to connect back.", classic_query(elsewhere))
    said = SimpleNamespace(java_exception=JavaThrowable(RECORDED_CHAIN[1:]))   # a Py4JJavaError at start
    assert transient(said)


def test_a_captured_exception_and_a_spark_connect_one_are_judged_by_their_jvm_stack_trace():
    captured = SimpleNamespace(_desc="[STREAM_FAILED] worded otherwise", _stackTrace="StreamExecution.runStream(...)",
                               _cause=SimpleNamespace(_desc=RECORDED_CAUSE.splitlines()[0], _stackTrace=RECORDED_CAUSE,
                                                      _cause=None, __cause__=None),
                               __cause__=None)
    assert [(t.cls, t.made_in) for t in failure_chain(captured)] == RECORDED_CHAIN[1:]
    assert transient(captured)

    connect = RuntimeError("(STREAM_FAILED) Query terminated with exception: worded otherwise\n\nJVM stacktrace:\n"
                           + STREAM_FAILED.format(said="worded otherwise", cause=RECORDED_CAUSE))
    assert [(t.cls, t.made_in) for t in failure_chain(connect)] == RECORDED_CHAIN
    assert transient(connect)
    user_error = STREAM_FAILED.format(
        said="Python worker failed to connect back (the user's words)",
        cause="org.apache.spark.api.python.PythonException: IsADirectoryError\n"
              "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(X.scala:1)")
    assert not transient(RuntimeError(f"...\n\nJVM stacktrace:\n{user_error}"))   # the trace decides, not the words


def test_without_any_trace_the_message_s_words_decide():
    assert transient(RuntimeError("Python worker failed to connect back."))
    assert not transient(RuntimeError("[FOREACH_BATCH_USER_FUNCTION_ERROR] IsADirectoryError"))


def test_a_stack_trace_s_rendering_parses_into_its_cause_chain():
    assert text_chain("no trace here") == []
    assert text_chain(RECORDED_CAUSE) == [Thrown(*RECORDED_CHAIN[1]), Thrown(*RECORDED_CHAIN[2])]
    java9 = "java.io.IOException: x\n\tat java.base/java.net.Socket.connect(Socket.java:1)\n"
    assert text_chain(java9) == [Thrown("java.io.IOException", "java.net.Socket")]
