"""A registered stream run as a Structured Streaming query: the engine seam's StreamRunner for Spark
(stream_registry/registry/runners/engine.py says what an engine is).

The registry keeps the stream's definition, history and control calls; this runner starts the query
(spark_bridge.stream_query) and turns the control calls into the control channel's (stream_control):
- `request_offsets` queues the change; it is applied when the first micro-batch of its epoch is planned from
  the target, and the reader's answer comes back as GateEvents (PERSISTED per partition, SUPERSEDED where a
  later change of the same micro-batch moved it); an onward target (`latest`, `+N`, a time after every record)
  that the query has read past by then is not a move back: the partition stays where it stands, and the event's
  reason says so (as the host gate's does);
- `cancel_pending` withdraws the changes the reader has not taken; a taken one will be applied and is not
  reported cancelled; a revert (`supersedes`) withdraws the moves of the change it reverts the same way, and
  reports them superseded;
- a query that fails is the stream's error (on_status ERROR with Spark's message);
- where a (re)started query resumes elsewhere than the group's committed offsets (the checkpoint wins) or the
  graph's stored ones (exactly-once: the graph wins), the reader's note becomes a `realigned` history row saying
  from where to where and why (on_realign), so a resume point is never silent.

Where a stream starts the first time (no checkpoint) is the backfill hand-off's resume point
(stream_registry.resume_point): a pending change, else the graph's stored offsets (exactly-once, else the log
start), else the group's committed offsets, else auto.offset.reset.

    engines={"spark": spark_engine(spark_session, work_dir, state_dir)}
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from stream_registry.config import CONSUMER_DEFAULTS, Delivery, StreamConfig
from stream_registry.errors import StreamError
from stream_registry.model import GateEvent, MoveState, PartitionKey, Realignment, StreamStatus, WorkerSnapshot
from stream_registry.registry.runners.engine import RunRequest

from .job import Loading, decoding_of
from .micro_batch import StreamWriting
from .spark_failures import transient
from .stream_control import ControlChannel
from .stream_offsets import StreamOffset, offsets_from_json
from .stream_query import StreamQuery, progress, start_stream_query

WATCH_S = 0.1
# Spark waits a fixed 10 s for a fresh Python worker to connect back (PythonWorkerFactory, SPARK-45245; not
# configurable): a loaded machine misses it now and then, and the query dies of it, mostly while it starts. It is
# recognised by its Java cause chain (spark_failures: Spark gives it no error condition).
TRANSIENT_RETRIES = 3
# A micro-batch spans at most this many of the stream's batches (maxOffsetsPerTrigger = batch_size x this): Spark's
# fixed cost per micro-batch (planning, the offset and commit logs, scheduling; ~0.1-0.3 s here) and the cores
# idle at its boundary are paid per micro-batch, so a stream catching up takes large ones. The transformation and
# the sink still see batch_size records at a time (the tasks stream their ranges), so memory does not grow; a
# change waits at most for the micro-batch in progress.
MICRO_BATCH_BATCHES = 64
log = logging.getLogger(__name__)


def spark_engine(spark, work_dir: str | Path, state_dir: str | Path | None = None) -> Callable[[RunRequest], SparkRunner]:
    """The engine factory: each stream's checkpoint and control directory under `work_dir/<name>/`."""
    return spark_engine_of(lambda config: spark, work_dir, state_dir)


def spark_engine_of(session_of: Callable[[StreamConfig], object], work_dir: str | Path,
                    state_dir: str | Path | None = None) -> Callable[[RunRequest], SparkRunner]:
    """The engine factory with each stream's session got when it starts (`session_of(config)`: `mgstreams serve`
    starts a local session or connects to spark.remote only when a Spark stream first runs)."""
    return lambda request: SparkRunner(request, lambda: session_of(request.config),
                                       Path(work_dir) / request.config.name, state_dir)


class SparkRunner:
    def __init__(self, request: RunRequest, spark, directory: Path, state_dir: str | Path | None = None):
        """`spark`: the session, or a function giving it when the query starts."""
        self.request, self.config = request, request.config
        self._session = spark if callable(spark) and not hasattr(spark, "readStream") else (lambda: spark)
        self.channel = ControlChannel(directory / "control")
        self.checkpoint = str(directory / "checkpoint")
        self.state_dir = state_dir
        self.pending = dict(request.pending())
        self.pid, self.pids, self.restarts = None, (), 0
        self.stopping = False
        self.query = None
        self._open: dict[int, frozenset[PartitionKey]] = {}   # change id -> its partitions, not yet answered
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._starting = threading.Event()   # start() returned; the session and the query are not up yet
        self._notes_seen = len(self.channel.notes())   # the notes of earlier runs were reported by those runs
        self._notes_size = -1

    @property
    def alive(self) -> bool:
        """Starting (its session and query start in the background), or its query runs."""
        if self._starting.is_set():
            return not self.stopping
        return self.query is not None and self.query.isActive

    def starting_detail(self) -> str | None:
        """What a starting Spark stream waits for (describe's `detail`)."""
        if self._starting.is_set():
            where = "its Spark Connect server" if self.config.spark_remote else \
                (self.config.spark_master or "the host's local Spark")
            return f"starting its Spark session and query ({where})"
        return None

    def start(self, timeout: float = 30.0) -> None:
        by_change: dict[int, dict[PartitionKey, int]] = {}
        onward: set[PartitionKey] = set()
        for tp, move in self.pending.items():
            by_change.setdefault(move.change_id or 0, {})[tp] = move.offset
            if move.onward:
                onward.add(tp)
        for change_id, offsets in sorted(by_change.items()):
            self.request_offsets(change_id, offsets, frozenset(onward & offsets.keys()))
        self._starting.set()
        self.request.events.on_status(StreamStatus.STARTING, None)
        self._thread = threading.Thread(target=self._run, name=f"spark-{self.config.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> str | None:
        """Stop the query. One still starting is not waited for: it is stopped as soon as Spark has started it
        (a session starting, or a Spark Connect server not answering, never holds a stop or a host's shutdown)."""
        self.stopping = True
        self._stop.set()
        if self.query is not None:
            self.query.stop()
        if self._thread is not None and not self._starting.is_set():
            self._thread.join(timeout)
        return None

    def snapshot(self) -> WorkerSnapshot:
        last: dict = (self.query.lastProgress or {}) if self.query is not None else {}
        sources = last.get("sources") or [{}]
        end = sources[0].get("endOffset")
        positions = StreamOffset.from_json(end if isinstance(end, dict) else _json(end)).next if end else {}
        return WorkerSnapshot(assigned=frozenset(positions), positions=dict(positions))

    def request_offsets(self, change_id: int, offsets: Mapping[PartitionKey, int],
                        onward: frozenset[PartitionKey] = frozenset(), supersedes: int | None = None) -> None:
        if supersedes is not None:
            self._supersede(supersedes)
        with self._lock:
            self._open[change_id] = frozenset(offsets)
        self.channel.request(change_id, offsets, onward)

    def cancel_pending(self, timeout: float, up_to: int | None = None) -> list[GateEvent] | None:
        cancelled = []
        with self._lock:
            for change_id, tps in sorted(self._open.items()):
                if (up_to is None or change_id <= up_to) and self.channel.cancel(change_id):
                    del self._open[change_id]
                    cancelled += [GateEvent(change_id=change_id, topic=t, partition=p, offset=-1,
                                            state=MoveState.CANCELLED) for t, p in sorted(tps)]
        return cancelled

    def _supersede(self, change_id: int) -> None:
        """A revert ends the reverted change's moves still waiting: withdrawn from the channel, reported
        superseded (one the reader took already will be applied, and the revert after it)."""
        with self._lock:
            tps = self._open.get(change_id)
            if tps is None or not self.channel.cancel(change_id):
                return
            del self._open[change_id]
        rows = sorted(tps)
        for i, (topic, partition) in enumerate(rows):
            self.request.events.on_change(GateEvent(change_id=change_id, topic=topic, partition=partition, offset=-1,
                                                    state=MoveState.SUPERSEDED, more=i < len(rows) - 1))

    def forget(self, change_id: int, tps: frozenset[PartitionKey]) -> None:
        pass

    def rss_bytes(self) -> int | None:
        return None

    def close(self) -> None:
        self._stop.set()

    def progress(self) -> dict:
        return progress(self.query) if self.query is not None else {}

    # -- internals -------------------------------------------------------------------------------------
    def _run(self) -> None:
        """The runner's thread: the session and the query start here, not in start(), so a host serves (and a
        PUT /start answers) at once while a Spark stream is `starting`; then it watches the query."""
        try:
            query = self._start_query()
        except StreamError as exc:
            self._starting.clear()
            if not self.stopping:
                self.request.events.on_status(StreamStatus.ERROR, str(exc))
            return
        self.query = query
        self._starting.clear()
        if self.stopping:     # stopped while it started: stop() found no query to stop
            query.stop()
            return
        self._watch()

    def _query(self, session=None) -> StreamQuery:
        c = self.config
        exactly_once = c.delivery == Delivery.EXACTLY_ONCE
        source = {"kafka.bootstrap.servers": c.bootstrap.text, "kafka.group.id": c.group_id,
                  "subscribe": ",".join(c.topics), "controlDir": str(self.channel.dir),
                  "maxOffsetsPerTrigger": str(c.batch_size * MICRO_BATCH_BATCHES),
                  **{f"kafka.{k}": str(v) for k, v in c.kafka_settings().items() if k not in ("group.id",)}}
        if exactly_once:
            source.update(resumeFrom="graph", sink=c.sink, sinkStream=c.name)
            if self.state_dir is not None:
                source.update(stream=c.name, stateDir=str(self.state_dir))
        else:
            reset = str(c.configs.get("auto.offset.reset", CONSUMER_DEFAULTS["auto.offset.reset"])).lower()
            source.update(resumeFrom="group",
                          startingOffsets="latest" if reset in ("latest", "end", "largest") else "earliest")
        loading = Loading(c.transform, (), c.sink, c.sink_credentials(), c.batch_size,
                          decoding=decoding_of(c), transform_options=dict(c.transform_options))
        return StreamQuery(source, StreamWriting(loading, c.name, exactly_once, tasks=_cores(session)),
                           self.checkpoint, c.name)

    def _watch(self) -> None:
        events, running = self.request.events, False
        while not self._stop.wait(WATCH_S):
            query = self.query
            if query is None:
                continue
            if not query.isActive:
                error = query.exception()
                if error is not None and not self.stopping and not self._retried(error, query):
                    events.on_status(StreamStatus.ERROR, f"spark: the query failed: {error}")
                if self.query is query:
                    return
                continue
            if not running:      # the query runs (start_stream_query returned once Spark started it)
                running = True
                events.on_status(StreamStatus.RUNNING, None)
            self._report_answers()
            self._report_notes()

    def _start_query(self):
        """Start the query; Spark's transient failure (spark_failures.transient) is tried again, anything else is a
        StreamError saying why (a start never ends in an internal error)."""
        while True:
            try:
                session = self._session()
                return start_stream_query(session, self._query(session))
            except Exception as exc:
                said = str(exc)
                if self.restarts < TRANSIENT_RETRIES and transient(exc):
                    self.restarts += 1
                    log.warning("stream %s: the Spark query did not start for a transient reason (%s); trying again "
                                "(%d of %d)", self.config.name, said.splitlines()[0], self.restarts, TRANSIENT_RETRIES)
                    continue
                why = said.splitlines()[0] if said else type(exc).__name__
                raise StreamError(f"spark: the query could not start: {why}") from None

    def _retried(self, error, query=None) -> bool:
        """A query that failed for a transient reason of Spark's own (spark_failures.transient) is started again
        from its checkpoint (at most TRANSIENT_RETRIES times per run, counted in `restarts`): whether it was."""
        said = str(error)
        if self.restarts >= TRANSIENT_RETRIES or not transient(error, query):
            return False
        self.restarts += 1
        log.warning("stream %s: the Spark query failed for a transient reason (%s); starting it again from its "
                    "checkpoint (%d of %d)", self.config.name, said.splitlines()[0], self.restarts, TRANSIENT_RETRIES)
        try:
            self.query = self._start_query()
        except StreamError as exc:
            self.request.events.on_status(StreamStatus.ERROR, str(exc))
        return True

    def _report_answers(self) -> None:
        with self._lock:
            open_changes = dict(self._open)
        for change_id in sorted(open_changes):
            answer = self.channel.applied(change_id)
            if answer is None:
                continue
            rows = sorted(answer.partitions.items())
            for i, ((topic, partition), (status, offset, previous)) in enumerate(rows):
                state = MoveState.SUPERSEDED if status in ("superseded", "gone") else MoveState.PERSISTED
                self.request.events.on_change(GateEvent(
                    change_id=change_id, topic=topic, partition=partition, offset=offset if offset is not None else -1,
                    state=state, previous_offset=previous, reason=answer.notes.get(PartitionKey(topic, partition)),
                    more=i < len(rows) - 1))
            with self._lock:
                self._open.pop(change_id, None)

    def _report_notes(self) -> None:
        """The reader's resume notes since this run started, as realigned history rows (read when it grew)."""
        try:
            size = (self.channel.dir / "notes.jsonl").stat().st_size
        except FileNotFoundError:
            return
        if size == self._notes_size:
            return
        try:
            notes = self.channel.notes()
        except ValueError:   # a line being written: read it next time
            return
        self._notes_size = size
        fresh, self._notes_seen = notes[self._notes_seen:], len(notes)
        for note in fresh:
            moves = resume_realignments(note)
            if moves:
                self.request.events.on_realign(moves)


def _cores(session) -> int | None:
    """The task slots of a classic session (`local[N]`: N): a micro-batch's ranges go to that many tasks, one wave
    with fewer tasks to schedule (StreamWriting.tasks); None (one task per range) where it is not known (Spark
    Connect, or no session)."""
    try:
        slots = int(session.sparkContext.defaultParallelism)
    except Exception:   # noqa: BLE001  (Spark Connect has no SparkContext)
        return None
    return slots if slots > 0 else None


def resume_realignments(note: dict) -> list[Realignment]:
    """A reader's note of a query resuming elsewhere than the group or the graph says, per partition: from the
    offset the other side held to where the query resumes, and why (other notes: none)."""
    kind = note.get("kind")
    if kind == "resume":      # at least once: the checkpoint wins over the group's committed offsets
        held, resumes = offsets_from_json(note["group"]), offsets_from_json(note["resumes"])
        why = ("the Spark query resumes from its checkpoint at {to}; the group's committed offset was {was} "
               "(committed elsewhere while the query was stopped)")
    elif kind == "realigned":  # exactly once: the graph's stored offsets win over the checkpoint
        held, resumes = offsets_from_json(note["checkpoint"]), offsets_from_json(note["resumes"])
        why = "the Spark query's checkpoint stood at {was}; it resumes from the graph's stored offset {to}"
    else:
        return []
    return [Realignment(topic=tp.topic, partition=tp.partition, previous_offset=held.get(tp), offset=offset,
                        reason=why.format(to=offset, was=held.get(tp)))
            for tp, offset in sorted(resumes.items())]


def _json(text) -> dict:
    import json

    return json.loads(text) if isinstance(text, str) else dict(text)
