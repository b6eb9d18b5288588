"""Which failures of a Spark stream's query are Spark's own transient ones, worth starting it again for.

Spark waits a fixed 10 s for a fresh Python worker to connect back (PythonWorkerFactory.createSimpleWorker,
SPARK-45245; no setting changes it), and a loaded machine misses that now and then, mostly while a query starts.
What Spark throws then (Spark 4.3.0's bytecode) is

    new SparkException("Python worker failed to connect back.", new SocketTimeoutException(...))

through SparkException's legacy constructor: the failure has NO error condition and NO SQLSTATE (nor is there one
for it in error-conditions.json). The query's own StreamingQueryException has one, STREAM_FAILED (XXKST), but that
is any failure of any query. So the signal is the Java cause chain: an exception thrown in PythonWorkerFactory
whose cause is a java.net.SocketTimeoutException. Where PySpark has it:

- a classic session: the query's Java StreamingQueryException, through py4j (`query._jsq.exception()`): the chain
  as Java objects, class names and stack frames (PySpark's own StreamingQueryException keeps no Java origin:
  its getCondition() is None there);
- a start Spark refuses on a classic session: the Py4JJavaError's `java_exception`, or the captured exception's
  JVM stack trace;
- Spark Connect: the server sends the query's failure as its toString, STREAM_FAILED and the JVM stack trace as
  text (Utils.stackTraceToString): the chain is read from that rendering's class names and frames
  (`Caused by: java.net.SocketTimeoutException`, `at org.apache.spark.api.python.PythonWorkerFactory...`), which
  do not change when Spark rewords its message.

Only when no JVM stack trace is to be had at all does the message's wording decide (FALLBACK_MESSAGE: Spark's
words in 4.0-4.3; a version that rewords them gets no retry there, and the stream shows the error).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

PYTHON_WORKER_FACTORY = "org.apache.spark.api.python.PythonWorkerFactory"
SOCKET_TIMEOUT = "java.net.SocketTimeoutException"
FALLBACK_MESSAGE = "Python worker failed to connect back"
MAX_DEPTH = 32

_HEADER = re.compile(r"^(?:Caused by: )?((?:[A-Za-z_$][\w$]*\.)+[A-Za-z_$][\w$]*)(?::\s|:?$)")
_FRAME = re.compile(r"^\s+at (?:[\w.$-]+/)?((?:[\w$]+\.)*[\w$]+)\.[\w$<>-]+\(")


@dataclass(frozen=True)
class Thrown:
    """One Java throwable of a failure's cause chain: its class and the class its first stack frame is in (where
    it was made)."""
    cls: str
    made_in: str | None


def is_worker_connect_timeout(chain: Sequence[Thrown]) -> bool:
    """Whether a cause chain (outermost first) holds Spark's missed Python-worker connect-back."""
    return any(outer.made_in is not None and outer.made_in.startswith(PYTHON_WORKER_FACTORY)
               and cause.cls == SOCKET_TIMEOUT for outer, cause in zip(chain, chain[1:], strict=False))


def java_chain(throwable) -> list[Thrown]:
    """The cause chain of a Java throwable reached through py4j, outermost first."""
    chain: list[Thrown] = []
    while throwable is not None and len(chain) < MAX_DEPTH:
        frames = throwable.getStackTrace()
        chain.append(Thrown(str(throwable.getClass().getName()),
                            str(frames[0].getClassName()) if len(frames) else None))
        throwable = throwable.getCause()
    return chain


def text_chain(text: str) -> list[Thrown]:
    """The top-level cause chain of a JVM stack trace in Throwable.printStackTrace's rendering (a header line per
    throwable, `Caused by: ` for each cause, then its `at` frames), outermost first; [] for no such text."""
    chain: list[Thrown] = []
    waiting = False    # a header was read; its first frame is still to come
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header and (not chain or line.startswith("Caused by: ")):
            chain.append(Thrown(header.group(1), None))
            waiting = True
            continue
        frame = _FRAME.match(line)
        if frame and waiting:
            chain[-1] = Thrown(chain[-1].cls, frame.group(1))
            waiting = False
    return chain


def failure_chain(error: BaseException | None, query=None) -> list[Thrown]:
    """The failure's Java cause chain, from the structured sources first (see the module docstring); [] when
    none of them is there."""
    jsq = getattr(query, "_jsq", None)        # a classic session's Java StreamingQuery
    if jsq is not None:
        try:
            failed = jsq.exception()
            if failed.isDefined():
                return java_chain(failed.get())
        except Exception:   # noqa: BLE001  (py4j gone with its JVM: read what the error says instead)
            pass
    java = getattr(error, "java_exception", None)     # a Py4JJavaError not converted by PySpark
    if java is not None:
        try:
            return java_chain(java)
        except Exception:   # noqa: BLE001
            pass
    for text in _stack_texts(error):
        chain = text_chain(text)
        if len(chain) > 1 or (chain and chain[0].made_in):
            return chain
    return []


def transient(error: BaseException | None, query=None) -> bool:
    """Whether a query's failure (or a refused start) is Spark's missed Python-worker connect-back."""
    chain = failure_chain(error, query)
    if chain:
        return is_worker_connect_timeout(chain)
    return FALLBACK_MESSAGE in str(error)


def _stack_texts(error: BaseException | None) -> Iterable[str]:
    """The JVM stack traces a PySpark exception carries: Spark Connect's (getStackTrace(), or the `JVM stacktrace:`
    part of its text), a classic captured exception's, and those of its causes."""
    seen = 0
    while error is not None and seen < MAX_DEPTH:
        seen += 1
        get = getattr(error, "getStackTrace", None)
        if callable(get):
            try:
                text = get()
            except Exception:   # noqa: BLE001
                text = None
            if isinstance(text, str):
                yield text
        said = str(error)
        if "JVM stacktrace:" in said:
            yield said.split("JVM stacktrace:", 1)[1]
        captured = getattr(error, "_stackTrace", None)
        if isinstance(captured, str):
            desc = getattr(error, "_desc", None)
            yield f"{desc}\n{captured}" if isinstance(desc, str) and not _HEADER.match(captured) else captured
        error = getattr(error, "_cause", None) or getattr(error, "__cause__", None)
