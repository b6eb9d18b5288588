"""`mgstreams backfill`: replay topic offset ranges through a transformation into graph loads.

    mgstreams backfill (--stream NAME [--state-dir D] | --topics T1,T2 --bootstrap-servers B [--group G])
        --from SPEC [--until latest|committed|SPEC] [--transform M.F] --sink URI
        [--engine auto|spark|local] [--master URL | --remote sc://HOST:PORT|local[N]]
        [--min-partitions N] [--batch-size N] [--writers N] [--prepare] [--report FILE] [--dry-run]

Also `spark-submit mgstreams/backfill_main.py ARGS...` (the master then comes
from spark-submit). SPECs are the registry's offset specs as typed in a shell
(`earliest`/`latest`; a bare -1 or -2 is refused as ambiguous), e.g. `earliest`, `1200`,
`2024-05-01T00:00:00Z`, `-500` as '"-500"' (relative to the committed offset),
or JSON '{"orders:0": 1200, "orders": "earliest"}'. `--until committed` ends
at the group's committed offsets; with `--stream`, `committed` (and what relative
specs are relative to) is the stream's resume point: a pending offset change,
else for an exactly-once stream the offset its sink stores, else the committed
offset (`spark_bridge.handoff`), where the live stream resumes: the hand-off.
`--engine auto` (the default) picks Spark or the local engine (this process, no
Spark) from the plan's size (spark_bridge.engine); the local engine needs none
of the `[spark]` extra. Exit status 0 on success, 1 with a one-line
reason on stderr otherwise, 2 on usage errors.
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import click

from spark_bridge.bolt_load import DEFAULT_WRITERS, MAX_WRITERS, is_bolt_uri, prepare_graph, prepare_statements
from spark_bridge.engine import Engine, choose_engine, spark_target
from spark_bridge.engine_costs import MeasuredCosts
from spark_bridge.engine_costs import Run as CostRun
from spark_bridge.job import BackfillJob, BackfillReport, plan_job
from stream_registry.errors import ConfigError, StreamError, TransformNotFound
from stream_registry.redaction import redact

from ..settings import SINK_PASSWORD_ENV, SPARK_REMOTE_ENV, STATE_DIR_ENV, default_state_dir
from .backfill_job import build_job
from .backfill_report import (
    console_on,
    partition_offsets,
    plan_table,
    report_json,
    report_table,
    run_local_with_progress,
    run_spark_with_progress,
)
from .usage import UsageCommand

ANALYTICAL_HINT = ("for a first big import Memgraph recommends `STORAGE MODE IN_MEMORY_ANALYTICAL;` (no transactions "
                   "to conflict or roll back); run `STORAGE MODE IN_MEMORY_TRANSACTIONAL;` before live streams write")


def _validate(job: BackfillJob) -> None:
    """job.validate(); a transformation found nowhere says how to point this command at it."""
    try:
        job.validate()
    except TransformNotFound as exc:
        raise TransformNotFound(f"{exc}; here: --modules-dir DIR") from None


class BackfillFailed(click.ClickException):
    exit_code = 1

    def show(self, file=None) -> None:
        click.echo(f"mgstreams: error: {self.message}", err=True)


@click.command("backfill", cls=UsageCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--stream", "stream_name", help="Backfill for a registered stream: its topics, cluster, "
              "client settings, consumer group and transformation.")
@click.option("--state-dir", type=click.Path(file_okay=False), envvar=STATE_DIR_ENV, default=None,
              show_envvar=True, help="The host's state directory (with --stream; default as for "
                                     "`mgstreams serve`); read only, the host may be running (but for "
                                     "engine-costs.json: what each engine cost here, for --engine auto).")
@click.option("--topics", help="Comma-separated topics (instead of --stream).")
@click.option("--bootstrap-servers", help="Kafka bootstrap servers (with --topics).")
@click.option("--group", "group_id", help="Consumer group whose committed offsets `--until committed` "
              "and relative specs refer to (with --topics).")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE",
              help="librdkafka setting for the readers (with --topics); repeatable. Not for secrets: a command "
                   "line is visible to every local user (use --config-file).")
@click.option("--config-file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="File of librdkafka settings, one KEY=VALUE a line (# comments): where secrets go.")
@click.option("--from", "start", required=True, metavar="SPEC", help="First offsets to replay.")
@click.option("--until", default="latest", show_default=True, metavar="latest|committed|SPEC",
              help="End offsets (exclusive), resolved when the job is planned. With --stream, committed is "
                   "where the stream resumes if started now (pending offset changes included).")
@click.option("--transform", metavar="MODULE.FUNCTION", help="Transformation (default: the stream's).")
@click.option("--modules-dir", "modules_dirs", multiple=True, type=click.Path(file_okay=False),
              help="Extra directory to find the transformation module in; repeatable.")
@click.option("--sink", required=True, metavar="URI", help="cypherl:///abs/dir (one file per range), "
              "bolt://host:port (UNWIND batches, one transaction per batch) or null://.")
@click.option("--sink-username", help=f"Bolt username; the password is read from ${SINK_PASSWORD_ENV}.")
@click.option("--min-partitions", type=click.IntRange(min=1), help="Split ranges into at least N Spark tasks.")
@click.option("--batch-size", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Messages per transformation call (and per sink transaction).")
@click.option("--writers", type=click.IntRange(min=1, max=MAX_WRITERS), default=DEFAULT_WRITERS,
              show_default=True, help="Bolt: concurrent transactions per executor host, at most.")
@click.option("--prepare", is_flag=True, help="Bolt: first create the indexes and uniqueness constraints the "
              "transformation's MERGE keys need (built-ins, or the module's MGSTREAMS_PREPARE).")
@click.option("--fail-on-data-loss/--no-fail-on-data-loss", default=True, show_default=True,
              help="Fail when a range's first offsets were deleted, or start at the earliest available.")
@click.option("--engine", "engine_name", type=click.Choice([e.value for e in Engine]), default="auto",
              show_default=True, help="spark, local (this process, no Spark), or auto: the faster for the "
              "plan's size.")
@click.option("--master", help="Spark master (default: local[*], or spark-submit's).")
@click.option("--remote", envvar=SPARK_REMOTE_ENV, show_envvar=True,
              help="Spark Connect: sc://host:port (a running server) or local[N] (a server "
              "started in this process). A URL with a token belongs in the environment variable, not argv.")
@click.option("--spark-ui", is_flag=True, help="Start the Spark web UI (off by default: it serves on every "
              "interface and can kill jobs).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), help="Also write the report as JSON.")
@click.option("--dry-run", is_flag=True, help="Print the plan and exit without starting Spark.")
def backfill(stream_name, state_dir, topics, bootstrap_servers, group_id, configs, config_file, start, until,
             transform, modules_dirs, sink, sink_username, min_partitions, batch_size, writers, prepare,
             fail_on_data_loss, engine_name, master, remote, spark_ui, report_path, dry_run) -> None:
    """Replay offset ranges through the stream's transformation into the graph, with Spark or locally."""
    out, err = console_on(sys.stdout), console_on(sys.stderr)
    _SECRETS[:] = _secrets_of(remote or master)
    handoff = _handoff_mark(stream_name, state_dir)   # before the resume point is read: a move after it is seen
    job = _guard(lambda: build_job(stream_name, state_dir, topics, bootstrap_servers, group_id, configs, start,
                                   until, transform, modules_dirs, sink, sink_username, min_partitions,
                                   batch_size, fail_on_data_loss, writers, config_file=config_file))
    _guard(lambda: _validate(job))
    if master and master.startswith("sc://") and not remote:
        master, remote = None, master       # --master sc://… was how Spark Connect was named before --remote
    _guard(lambda: _check_engine_options(Engine(engine_name), master, remote))
    schema = _guard(lambda: _prepare_statements(job)) if prepare else ()
    range_plan = _guard(lambda: plan_job(job))
    err.print(f"plan: {len(range_plan.ranges)} range(s), {range_plan.total_offsets} offset(s) of "
              f"{', '.join(job.topics)}")
    if job.resume_offsets is not None:
        err.print(f"committed: stream {stream_name!r}'s resume point, "
                  f"{partition_offsets(job.resume_offsets)}", markup=False)
    for note in range_plan.notes:
        err.print(f"note: {note}", markup=False)
    target, costs = _guard(lambda: _target(master, remote)), _measured_costs(state_dir)
    choice = _guard(lambda: choose_engine(engine_name, range_plan, target, costs=costs, transform=job.transform))
    err.print(f"engine: {choice.engine.value} ({choice.reason})", markup=False)
    if dry_run:
        for statement in schema:
            err.print(f"prepare (not run, --dry-run): {statement}", markup=False)
        out.print(plan_table(range_plan))
        return
    for result in (_guard(lambda: prepare_graph(job.sink, job.sink_credentials, schema)) if schema else ()):
        err.print(f"prepare: {result.statement} {result.status.value}", markup=False)
    if schema:
        err.print(f"note: {ANALYTICAL_HINT}", markup=False)
    if not range_plan.ranges:
        err.print("nothing to backfill")
        report = BackfillReport(range_plan, (), datetime.now(UTC), 0.0)
        _write_report(report_path, report, job, choice, master, remote, 0.0)
        return
    session_seconds = 0.0
    if choice.engine is Engine.LOCAL:
        report = _guard(lambda: run_local_with_progress(job, range_plan, err))
    else:
        started = time.perf_counter()
        spark, owned = _guard(lambda: _session(master, remote, spark_ui))
        session_seconds = time.perf_counter() - started
        try:
            report = _guard(lambda: run_spark_with_progress(spark, job, range_plan, err))
        finally:
            if owned:
                from spark_bridge.spark_session import stop_session

                stop_session(spark)
    out.print(report_table(report))
    costs.record(CostRun(choice.engine.value, target.description if choice.engine is Engine.SPARK else "",
                         job.transform, range_plan.total_offsets, report.seconds, session_seconds))
    if choice.engine is Engine.SPARK:
        err.print(f"spark session start: {session_seconds:.1f} s")
    _write_report(report_path, report, job, choice, master, remote, session_seconds)
    if handoff is not None and job.resume_offsets is not None:   # the hand-off: the stream must not have moved
        from spark_bridge.handoff import check_unmoved

        _guard(lambda: check_unmoved(handoff[0], stream_name, handoff[1], job.resume_offsets))


def _measured_costs(state_dir: str | None) -> MeasuredCosts:
    """What the engines cost in earlier backfills here (spark_bridge.engine_costs), kept in the state directory;
    none when it cannot be found (the estimate then uses the constants)."""
    try:
        return MeasuredCosts.load(state_dir or default_state_dir())
    except ConfigError:
        return MeasuredCosts(None)


def _handoff_mark(stream_name: str | None, state_dir: str | None) -> tuple[str, int] | None:
    """(state dir, newest change id) of a registered stream, to see its offsets moved while the backfill runs."""
    if not stream_name:
        return None
    from spark_bridge.handoff import offset_changes_mark

    where = state_dir or default_state_dir()
    return where, _guard(lambda: offset_changes_mark(where, stream_name))


def _write_report(path, report: BackfillReport, job: BackfillJob, choice, master, remote,
                  session_seconds: float) -> None:
    if path:
        text = json.dumps(report_json(report, job, choice, master, remote, session_seconds), indent=2) + "\n"
        _guard(lambda: Path(path).write_text(text))


# -- running -----------------------------------------------------------------------------
def _check_engine_options(engine: Engine, master: str | None, remote: str | None) -> None:
    if master and remote:
        raise ConfigError(f"--remote: give --master (classic Spark) or --remote (Spark Connect), not both "
                          f"(got --master {master!r} and --remote {remote!r})")
    if engine is Engine.LOCAL and (master or remote):
        option, value = ("--remote", remote) if remote else ("--master", master)
        raise ConfigError(f"{option}: {value!r} names a Spark engine, but --engine local runs in this process; "
                          f"drop {option} or use --engine spark/auto")
    if remote:
        from spark_bridge.spark_session import check_remote

        check_remote(remote)


def _prepare_statements(job: BackfillJob) -> tuple[str, ...]:
    if not is_bolt_uri(job.sink):
        raise ConfigError(f"--prepare: creates indexes and constraints in Memgraph, so it needs a bolt://, "
                          f"bolt+s:// or bolt+ssc:// --sink, got {job.sink!r}")
    return prepare_statements(job.transform, job.search_dirs)


def _target(master: str | None, remote: str | None):
    """Where Spark would run, for the cost estimate: without importing pyspark unless it is imported already."""
    from spark_bridge.spark_session import under_spark_submit

    active = False
    if not remote and not master and "pyspark.sql" in sys.modules:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession() is not None
    return spark_target(master, remote, active_session=active, under_submit=under_spark_submit())


def _session(master: str | None, remote: str | None = None, spark_ui: bool = False):
    """A Spark Connect session for --remote (made here, stopped after); else the active SparkSession when
    there is one (tests, notebooks, spark-submit), else a new one (its web UI only with --spark-ui)."""
    from spark_bridge.spark_session import build_session

    conf = {"spark.ui.enabled": "true"} if spark_ui else None
    if remote:
        return build_session(remote=remote, conf=conf if not remote.startswith("sc://") else None), True
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and not master:
        return active, False
    return build_session(master, conf=conf), active is None


_SECRETS: list[str] = []


def _secrets_of(remote: str | None) -> list[str]:
    found = [os.environ.get(SINK_PASSWORD_ENV, "")]
    if remote:
        found += re.findall(r";\s*(?:token|[\w-]*secret[\w-]*|[\w-]*password[\w-]*)\s*=([^;]+)", remote, re.I)
    return [value for value in found if value]


def _guard(action):
    """Run a step; any failure becomes exit status 1 with a one-line reason (secrets masked)."""
    try:
        return action()
    except click.ClickException:
        raise
    except StreamError as exc:
        raise BackfillFailed(redact(_one_line(str(exc)), _SECRETS)) from None
    except Exception as exc:  # Spark, Py4J and Python worker errors carry tracebacks
        raise BackfillFailed(redact(root_cause(exc), _SECRETS)) from None


_PY_ERROR = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception|Failed|NotFound)): (.+)$")


def root_cause(exc: BaseException) -> str:
    """The innermost Python error a Spark exception carries, on one line (else its first line)."""
    text = str(exc)
    found = [m for m in (_PY_ERROR.match(line.strip()) for line in text.splitlines()) if m]
    if found:
        name, message = found[-1].groups()
        return _one_line(f"{message} ({name})")
    first = next((line for line in text.splitlines() if line.strip()), type(exc).__name__)
    return _one_line(f"{type(exc).__name__}: {first}")


def _one_line(text: str) -> str:
    return " ".join(text.split())
